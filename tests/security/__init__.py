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
"""
