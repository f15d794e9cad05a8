"""Exit codes and the one error family that means "refused, nothing harmed".

Exit codes are a contract for scripts and CI: 0 success; 1 the run worked but
found problems (quarantined nodes, audit violations); 2 bad usage, a bad spec,
or a refusal (the cluster lock is held, a secret cannot be read, a move the
lifecycle forbids); 3 an internal error, with the run directory named; 130 an
interrupt. Every error a user can cause derives from :class:`Refusal`, so the
command line and the run lifecycle map it to 2 the same way without knowing
each module's exceptions.
"""

from __future__ import annotations

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class Refusal(Exception):
    """Bad input or a state that forbids the command: exit 2, with the message as the whole story."""


class UsageProblem(Refusal, ValueError):
    """The command line asks for something the spec or the store cannot give (unknown host, phase)."""


def exit_code_for(error: BaseException) -> int:
    """The exit code a command ends with when ``error`` escapes it."""
    if isinstance(error, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(error, Refusal):
        return EXIT_USAGE
    return EXIT_INTERNAL
