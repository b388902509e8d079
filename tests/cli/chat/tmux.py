"""Drive a program in a real terminal: a detached tmux session on a private tmux server."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from pathlib import Path

TMUX = shutil.which("tmux") or "/usr/bin/tmux"
PROMPT = ">"


class Tmux:
    def __init__(self, socket: Path, cwd: str, width: int = 120, height: int = 40):
        self.socket = str(socket)   # a server of our own: never touch anyone else's sessions
        self.cwd, self.width, self.height = cwd, width, height
        self.name = "chat"

    def _tmux(self, *args: str) -> str:
        return subprocess.run([TMUX, "-S", self.socket, *args], check=True, capture_output=True,
                              text=True, timeout=10).stdout

    def start(self, argv: list[str], env: dict[str, str]) -> None:
        """Run `argv` in the pane; when it ends the pane shows `EXITED <status>` and stays."""
        cmd = shlex.join(["env", *[f"{k}={v}" for k, v in env.items()], *argv])
        self._tmux("new-session", "-d", "-s", self.name, "-x", str(self.width),
                   "-y", str(self.height), "-c", self.cwd,
                   f"{cmd}; echo EXITED $?; sleep 600")

    def type_line(self, text: str) -> None:
        self._tmux("send-keys", "-t", self.name, "-l", text)
        self._tmux("send-keys", "-t", self.name, "Enter")

    def key(self, key: str) -> None:
        self._tmux("send-keys", "-t", self.name, key)

    def screen(self) -> list[str]:
        """Everything shown so far, wrapped lines joined, trailing blanks dropped."""
        out = self._tmux("capture-pane", "-p", "-J", "-S", "-", "-t", self.name)
        return [line.rstrip() for line in out.splitlines()]

    def wait_for(self, ok, what: str, timeout: float = 30.0) -> list[str]:
        deadline = time.monotonic() + timeout
        while True:
            lines = self.screen()
            if ok(lines):
                return lines
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout:g}s; screen:\n" + "\n".join(lines))
            time.sleep(0.1)

    def close(self) -> None:
        subprocess.run([TMUX, "-S", self.socket, "kill-server"], capture_output=True, timeout=10)
        Path(self.socket).unlink(missing_ok=True)


def is_prompt(line: str) -> bool:
    return line == PROMPT or line.startswith(PROMPT + " ")


def after_question(lines: list[str], question: str) -> tuple[list[str], bool]:
    """The lines shown after the last `> question`, up to the next prompt; and whether the
    prompt is back."""
    asked = [i for i, line in enumerate(lines) if line == f"{PROMPT} {question}"]
    if not asked:
        return [], False
    rest = lines[asked[-1] + 1:]
    for i, line in enumerate(rest):
        if is_prompt(line):
            return rest[:i], True
    return rest, False
