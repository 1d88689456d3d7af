"""Search and page-reading backends for WideSearch's tools.

- ``bing``: the Bing Web Search API, as WideSearch's own harness calls it (key in
  ``$BingSearch_APIKEY``, endpoint ``$BING_SEARCH_URL``); pages fetched over HTTP and reduced
  to text. Label ``real``.
- ``corpus``: keyword search over a local JSONL of pages (``{"url", "title", "text"}``), e.g.
  the fixture corpus; a page is its stored text. Label ``local_corpus``.
- ``simulated``: a world model plays the web (the study's Paradigm I): an OpenAI-compatible
  endpoint (``openai:URL#MODEL``) or a local checkpoint (the process's shared copy,
  :func:`unified.inference.shared_chat_model`) is asked for the result list of a query and for
  the text of a page. Label ``simulated``, and every
  observation it produces starts with ``[simulated]``.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from unified.inference import shared_chat_model

RESULT_FORMAT = "[index] {i}\n[title] {title}\n[Url] {url}\n[snippet] {snippet}"


class SearchUnavailable(RuntimeError):
    """A backend that cannot work here (missing key, missing corpus); the message says what to set."""


class SearchBackend:
    name = ""
    label = ""

    def search(self, query: str, count: int = 10) -> str:
        raise NotImplementedError

    def open_page(self, url: str, goal: str = "") -> str:
        raise NotImplementedError

    def close(self) -> None:
        pass


def _tokens(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


class CorpusSearch(SearchBackend):
    """BM25 over a local page corpus."""

    name, label = "corpus", "local_corpus"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise SearchUnavailable(f"corpus {self.path} does not exist")
        self.pages = []
        for i, line in enumerate(self.path.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                page = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{self.path}:{i}: invalid JSON: {exc}") from None
            missing = [k for k in ("url", "title", "text") if not isinstance(page.get(k), str)]
            if missing:
                raise ValueError(f"{self.path}:{i}: missing string field(s) {missing}")
            self.pages.append(page)
        self.docs = [Counter(_tokens(p["title"] + " " + p["text"])) for p in self.pages]
        self.avg_len = sum(sum(d.values()) for d in self.docs) / max(len(self.docs), 1)
        self.df = Counter(t for d in self.docs for t in d)

    def search(self, query: str, count: int = 10) -> str:
        q = _tokens(query)
        n = len(self.docs)
        scored = []
        for i, doc in enumerate(self.docs):
            length = sum(doc.values())
            s = 0.0
            for t in q:
                if doc[t]:
                    idf = math.log(1 + (n - self.df[t] + 0.5) / (self.df[t] + 0.5))
                    s += idf * doc[t] * 2.2 / (doc[t] + 1.2 * (0.25 + 0.75 * length / self.avg_len))
            if s > 0:
                scored.append((s, i))
        scored.sort(key=lambda x: -x[0])
        if not scored:
            return "No results."
        return "\n\n".join(RESULT_FORMAT.format(i=k, title=self.pages[i]["title"], url=self.pages[i]["url"],
                                                snippet=self.pages[i]["text"][:200])
                           for k, (_, i) in enumerate(scored[:count], start=1))

    def open_page(self, url: str, goal: str = "") -> str:
        for page in self.pages:
            if page["url"] == url:
                return f"{page['title']}\n\n{page['text']}"
        return f"Page not found: {url}"


class _TextExtractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style", "noscript"):
            self._skip += 1

    def handle_endtag(self, tag):
        if tag in ("script", "style", "noscript") and self._skip:
            self._skip -= 1
        if tag in ("p", "div", "br", "li", "tr", "h1", "h2", "h3", "table"):
            self.parts.append("\n")

    def handle_data(self, data):
        if not self._skip:
            self.parts.append(data)


def html_to_text(raw: str) -> str:
    parser = _TextExtractor()
    parser.feed(raw)
    text = html.unescape("".join(parser.parts))
    return re.sub(r"\n\s*\n+", "\n\n", re.sub(r"[ \t]+", " ", text)).strip()


class BingSearch(SearchBackend):
    name, label = "bing", "real"

    def __init__(self, max_page_chars: int = 20000) -> None:
        self.key = os.environ.get("BingSearch_APIKEY")
        if not self.key:
            raise SearchUnavailable("the bing backend needs $BingSearch_APIKEY")
        self.url = os.environ.get("BING_SEARCH_URL", "https://api.bing.microsoft.com/v7.0/search")
        self.max_page_chars = max_page_chars

    def search(self, query: str, count: int = 10) -> str:
        import httpx

        r = httpx.get(self.url, params={"q": query, "count": count}, headers={"Ocp-Apim-Subscription-Key": self.key},
                      timeout=60)
        r.raise_for_status()
        pages = r.json().get("webPages", {}).get("value", [])
        return "\n\n".join(RESULT_FORMAT.format(i=i, title=p.get("name", ""), url=p.get("url", ""),
                                                snippet=p.get("snippet", ""))
                           for i, p in enumerate(pages, start=1)) or "No results."

    def open_page(self, url: str, goal: str = "") -> str:
        import httpx

        r = httpx.get(url, timeout=60, follow_redirects=True)
        r.raise_for_status()
        return html_to_text(r.text)[: self.max_page_chars]


SIM_SEARCH_PROMPT = """You are a web search engine. Return the top {count} results for the query below, as \
they would appear on the real web, in exactly this format, separated by blank lines:
[index] 1
[title] ...
[Url] https://...
[snippet] ...

Query: {query}"""
SIM_PAGE_PROMPT = """You are a web server. Return the main text content of the web page at the URL below, as \
it would read on the real web (plain text, no HTML). The reader is looking for: {goal}

URL: {url}"""


class SimulatedSearch(SearchBackend):
    """The world model answers queries and renders pages (every output marked ``[simulated]``)."""

    name, label = "simulated", "simulated"

    def __init__(self, model: str, max_tokens: int = 512) -> None:
        self.chat_model = shared_chat_model(model)  # a local checkpoint: the process's one copy
        self.max_tokens = max_tokens
        self.model = model

    def _ask(self, prompt: str) -> str:
        return self.chat_model.chat([{"role": "user", "content": prompt}], max_tokens=self.max_tokens, temperature=0.0)

    def search(self, query: str, count: int = 10) -> str:
        return "[simulated] " + self._ask(SIM_SEARCH_PROMPT.format(count=count, query=query))

    def open_page(self, url: str, goal: str = "") -> str:
        return "[simulated] " + self._ask(SIM_PAGE_PROMPT.format(url=url, goal=goal or "the page's content"))

    def close(self) -> None:
        """Nothing to release: the shared model stays for the process's other callers."""


class NoSearch(SearchBackend):
    """No search at all: for a replay of the gold tables (``--model gold``), which makes no calls.
    A call that does come answers that there is no search in this run."""

    name, label = "none", "none"

    def search(self, query: str, count: int = 10) -> str:
        return "No search backend in this run (a replay of the reference answers makes no search calls)."

    def open_page(self, url: str, goal: str = "") -> str:
        return self.search(url)


def make_backend(name: str, *, corpus: str | None = None, model: str | None = None, **options: Any) -> SearchBackend:
    """A search backend by name (``bing``, ``corpus``, ``simulated``; ``none`` for a gold replay)."""
    if name == "none":
        return NoSearch()
    if name == "corpus":
        if not corpus:
            raise SearchUnavailable("the corpus backend needs a corpus file (--set benchmarks.widesearch.corpus=PATH)")
        return CorpusSearch(corpus)
    if name == "bing":
        return BingSearch()
    if name == "simulated":
        if not model:
            raise SearchUnavailable("the simulated backend needs search_model (openai:URL#MODEL or a checkpoint)")
        return SimulatedSearch(model, **options)
    raise SearchUnavailable(f"unknown search backend {name!r}; valid: bing, corpus, simulated")
