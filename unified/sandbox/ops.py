"""File and web operations executed *inside* the sandbox (never on the host).

Every workspace tool (read, write, edit, glob, grep, web fetch) that an adapter runs through
:meth:`unified.execution.workspace.WorkspaceSession.tool` runs as
``python3 -c OPS_SOURCE <op>`` inside :class:`unified.sandbox.Sandbox`, with the JSON
arguments on stdin and a JSON answer on stdout. The model's paths are therefore resolved by
the sandbox's own filesystem: the workspace is the only writable place, the rest of the root
is read-only, the host's home and repositories are not mounted at all, and there is no network
(a fetch fails inside the sandbox and comes back as an observation).
"""

from __future__ import annotations

import json
from typing import Any

from unified.sandbox import Sandbox

OPS_SOURCE = r'''
import sys, json, os, glob as _glob, re
op = sys.argv[1]
args = json.loads(sys.stdin.read() or "{}")
def out(**kw):
    sys.stdout.write(json.dumps(kw)); sys.exit(0)
def path_of(key="path"):
    p = args.get(key) or args.get("file_path") or args.get("path")
    if not p:
        out(ok=False, error="missing 'path'")
    return os.path.join(os.getcwd(), p) if not os.path.isabs(p) else p
try:
    if op == "read":
        p = path_of()
        with open(p, "rb") as f:
            raw = f.read(int(args.get("max_bytes", 200000)) + 1)
        if b"\x00" in raw[:4096]:
            out(ok=True, content="[binary file, %d bytes shown as nothing]" % os.path.getsize(p), binary=True)
        text = raw.decode("utf-8", errors="replace")
        lines = text.splitlines()
        off, lim = args.get("offset"), args.get("limit")
        if off is not None or lim is not None:
            start = max(int(off or 1) - 1, 0)
            end = start + int(lim) if lim else len(lines)
            text = "\n".join("%6d\t%s" % (i + 1, l) for i, l in enumerate(lines[start:end], start))
        out(ok=True, content=text, size=os.path.getsize(p))
    elif op == "write":
        p = path_of()
        d = os.path.dirname(p)
        if d:
            os.makedirs(d, exist_ok=True)
        data = str(args.get("content", ""))
        with open(p, "w", encoding="utf-8") as f:
            f.write(data)
        out(ok=True, content="wrote %d bytes to %s" % (len(data.encode()), p))
    elif op == "edit":
        p = path_of()
        old = args.get("old") if args.get("old") is not None else ""
        new = args.get("new") if args.get("new") is not None else ""
        with open(p, encoding="utf-8") as f:
            text = f.read()
        n = text.count(old) if old else 0
        if n == 0:
            out(ok=False, error="old text not found in %s" % p)
        if n > 1 and not args.get("replace_all"):
            out(ok=False, error="old text found %d times in %s; give more context or replace_all" % (n, p))
        text = text.replace(old, new) if args.get("replace_all") else text.replace(old, new, 1)
        with open(p, "w", encoding="utf-8") as f:
            f.write(text)
        out(ok=True, content="edited %s (%d replacement%s)" % (p, n if args.get("replace_all") else 1, "s" if n > 1 and args.get("replace_all") else ""))
    elif op == "glob":
        base = args.get("path") or os.getcwd()
        hits = sorted(_glob.glob(os.path.join(base, args.get("pattern", "*")), recursive=True))[:500]
        out(ok=True, content="\n".join(hits) if hits else "no files match")
    elif op == "grep":
        base = args.get("path") or os.getcwd()
        flags = re.IGNORECASE if args.get("case_insensitive") else 0
        rx = re.compile(args.get("pattern", ""), flags)
        files = [base] if os.path.isfile(base) else [
            os.path.join(r, n) for r, _, ns in os.walk(base) for n in ns]
        pat = args.get("glob")
        mode = args.get("output_mode") or "files_with_matches"
        lines, hits, counts = [], [], {}
        for fp in sorted(files):
            if pat and not _glob.fnmatch.fnmatch(os.path.basename(fp), pat):
                continue
            try:
                with open(fp, encoding="utf-8", errors="strict") as f:
                    for i, line in enumerate(f, 1):
                        if rx.search(line):
                            counts[fp] = counts.get(fp, 0) + 1
                            lines.append("%s:%d:%s" % (fp, i, line.rstrip("\n")))
            except (UnicodeDecodeError, OSError):
                continue
        head = int(args.get("head_limit") or 0) or None
        if mode == "content":
            res = lines[:head]
        elif mode == "count":
            res = ["%s:%d" % kv for kv in counts.items()][:head]
        else:
            res = list(counts)[:head]
        out(ok=True, content="\n".join(res) if res else "no matches")
    elif op == "fetch":
        import urllib.request
        url = str(args.get("url", ""))
        if not url.startswith(("http://", "https://")):
            out(ok=False, error="only http(s) URLs can be fetched: %r" % url)
        with urllib.request.urlopen(url, timeout=float(args.get("timeout", 10))) as r:
            body = r.read(int(args.get("max_chars", 50000))).decode("utf-8", errors="replace")
        out(ok=True, content=body)
    else:
        out(ok=False, error="unknown op %r" % op)
except SystemExit:
    raise
except BaseException as exc:
    out(ok=False, error="%s: %s" % (type(exc).__name__, exc))
'''


def run_op(box: Sandbox, op: str, args: dict[str, Any], timeout_s: float = 30.0) -> tuple[bool, str]:
    """Run one file/web operation inside ``box``; returns ``(ok, text)``."""
    result = box.run(["/usr/bin/python3", "-I", "-S", "-c", OPS_SOURCE, op], timeout_s=timeout_s,
                     stdin=json.dumps(args))
    if result.timed_out:
        return False, f"{op} timed out after {timeout_s:.0f}s"
    try:
        answer = json.loads(result.stdout)
    except ValueError:
        return False, f"{op} failed (exit {result.exit_code}): {(result.stderr or result.stdout)[-2000:]}"
    if answer.get("ok"):
        return True, str(answer.get("content", ""))
    return False, str(answer.get("error", "failed"))


def run_shell(box: Sandbox, command: str, timeout_s: float, max_chars: int = 30000) -> tuple[bool, str, dict[str, Any]]:
    """Run a shell command in the workspace; the observation text shows output, exit code, timeout."""
    result = box.run(command, timeout_s=timeout_s)
    text = result.stdout
    if result.stderr:
        text += ("\n" if text else "") + result.stderr
    if len(text) > max_chars:
        text = text[:max_chars] + f"\n[... {len(text) - max_chars} characters cut]"
    if result.timed_out:
        text += f"\n[command timed out after {timeout_s:.0f}s and was killed]"
    elif result.exit_code != 0:
        text += f"\n[exit code {result.exit_code}]"
    meta = {"exit_code": result.exit_code, "timed_out": result.timed_out, "duration_s": round(result.duration_s, 3),
            "sandbox": result.backend}
    return result.exit_code == 0 and not result.timed_out, text or "(no output)", meta
