"""The header every timing table of experiments/ starts with: its command, when and where it ran, the load."""

from __future__ import annotations

import os
import platform
from datetime import datetime, timezone

import torch


def header(title: str, command: str, load_before: tuple[float, ...], extra: str = "") -> list[str]:
    """Markdown lines: the title, the command, date, machine and torch, the load averages before and now (a number
    measured beside other work says so), and ``extra`` as the header's last line."""
    from bayesx.store.provenance import cpu_model

    load_after = os.getloadavg()
    lines = [f"# {title}", "", f"Command: `{command}`  ",
             f"Date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; machine: {cpu_model()} ({platform.machine()}, "
             f"{os.cpu_count()} cores), torch {torch.__version__}  ",
             f"Load average (1, 5, 15 min): {', '.join(f'{v:.2f}' for v in load_before)} before, "
             f"{', '.join(f'{v:.2f}' for v in load_after)} after (2 cores idle = 0)" + ("  " if extra else "")]
    return lines + ([extra] if extra else []) + [""]


def publish(lines: list[str], out) -> None:
    """Print the table and write it to ``out`` (a Path; None: print only)."""
    text = "\n".join(lines)
    print(text)
    if out:
        out.write_text(text)
