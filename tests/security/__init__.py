"""The library's threat model, as tests: what an agent may do, and what it may never reach.

The agent is the model under evaluation or training, and everything it writes or runs is
untrusted, including what it leaves behind for graders and verifiers. It MAY: run any command
inside its sandbox or container, as its own unprivileged user; read and write its workspace;
start background processes, daemons and tmux servers; fill its own memory, ``/tmp``, disk and
process table up to its limits; print without end; plant files of any kind (``.pth`` files,
symlinks, FIFOs) in its workspace.

It may NEVER: read a value of the host's environment (API keys, tokens), through ``env``,
``/proc/<pid>/environ`` or any other door, nor have one recorded in an episode or result;
influence a grader or verifier beyond the files it is graded on (no code of its own runs in a
grader, no process of its own survives into verification, no reward file of its own is read);
reach the network when the task gives it none (graders included); take more host memory, disk
or processes than its limits, or make the host read more of its output than the cap; make a
task file copy host files into its workspace; leave temporary state behind on the host.

Each module takes one of these promises, attacks it the way an agent would, and checks it holds
on every backend this machine has (bubblewrap sandbox, ``local`` execution backend; container
engines where one runs). Tests that need bubblewrap or tmux skip, with the install line, where
they are missing.

The model's text is untrusted input to the harness itself, and so are a judge's answers and a
user's numbers: a completion may be anything and may never stop a run or escape the parser
(``test_model_output``, ``test_tool_call_fuzz``); ``--max-seconds`` holds while the model is
still generating (``test_generation_deadline``); a judge's junk never crashes a reward or earns
full marks (``test_judge_answers``); one run owns its directory (``test_run_directory``); what
the harness starts dies with it and leaves nothing in ``/tmp`` (``test_child_processes``); bad
flags and recipe values are usage errors (``test_usage_errors``).
"""
