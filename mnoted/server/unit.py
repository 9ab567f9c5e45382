"""The systemd user unit of mnoted, and ``mnote install-service`` that puts it in place.

``systemd/mnoted.service`` in the repository is written from :data:`UNIT` (a test keeps
them equal), so the installed unit and the documented one are the same text.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

UNIT = """\
# mnoted as a user service:
#   cp systemd/mnoted.service ~/.config/systemd/user/ && systemctl --user daemon-reload
#   systemctl --user enable --now mnoted
# Workspaces come from ~/.config/mnoted/config.toml:  workspaces = ["~/notes"]
[Unit]
Description=mnoted - Markdown notes for people and AI agents, versioned in Git
After=default.target

[Service]
Type=notify
NotifyAccess=main
ExecStart={exec_start}
ExecReload=/bin/kill -HUP $MAINPID
Restart=on-failure
RestartSec=2
WatchdogSec=60
TimeoutStopSec=30
Environment=MNOTED_LOG=info
# Room for connections and packs (the daemon raises its soft limit to this hard one), and a
# ceiling on memory that a note or caller cannot push the machine past.
LimitNOFILE=65536
MemoryHigh=1536M
MemoryMax=2G
# Sandboxing that still lets it write the workspaces under the home folder.
NoNewPrivileges=yes
PrivateTmp=yes
ProtectSystem=strict
ProtectHome=no
ReadWritePaths=%h %t
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectControlGroups=yes
RestrictAddressFamilies=AF_UNIX
RestrictNamespaces=yes
LockPersonality=yes
MemoryDenyWriteExecute=yes
SystemCallArchitectures=native

[Install]
WantedBy=default.target
"""


def render(exec_start: str = "%h/.local/bin/mnoted") -> str:
    return UNIT.replace("{exec_start}", exec_start)


def unit_word(path: str) -> str:
    """``path`` as one word of a unit file: its ``%`` doubled (systemd reads ``%h`` and the
    like as specifiers), quoted if it holds a space, a quote or a backslash."""
    word = path.replace("%", "%%")
    if any(c.isspace() or c in "\"'\\" for c in word):
        word = '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return word


def install(
    home: Path, exec_start: str, workspaces: list[Path], *, enable: bool
) -> tuple[list[str], bool]:
    """Write the unit (and the workspaces into the config file); enable it if asked.

    Returns what was done, one line each, for the user to read, and whether all of it
    was: False when enabling was asked for and systemd could not be reached, reloaded or
    told to start the unit.
    """
    done = []
    unit_dir = home / ".config" / "systemd" / "user"
    unit_dir.mkdir(parents=True, exist_ok=True)
    unit_path = unit_dir / "mnoted.service"
    unit_path.write_text(render(unit_word(exec_start)), encoding="utf-8")
    done.append(f"wrote {unit_path}")
    outside = [w.resolve() for w in workspaces if not w.resolve().is_relative_to(home)]
    dropin = unit_dir / "mnoted.service.d" / "workspaces.conf"
    if outside:
        # The unit may write only under the home folder (ProtectSystem=strict): a workspace
        # elsewhere gets a drop-in, so the unit itself stays the documented text.
        dropin.parent.mkdir(exist_ok=True)
        lines = [f"ReadWritePaths={unit_word(str(w))}" for w in outside]
        dropin.write_text("[Service]\n" + "\n".join(lines) + "\n", encoding="utf-8")
        done.append(f"wrote {dropin} (workspaces outside {home})")
    if workspaces:
        config = home / ".config" / "mnoted" / "config.toml"
        config.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        existing = config.read_text(encoding="utf-8") if config.exists() else ""
        if "workspaces" in existing:
            done.append(f"left {config} as it is (it already names workspaces)")
        else:
            # (a JSON string is a TOML basic string: a quote or backslash in a path holds)
            listed = ", ".join(json.dumps(str(w.resolve()), ensure_ascii=False) for w in workspaces)
            config.write_text(existing + f"workspaces = [{listed}]\n", encoding="utf-8")
            done.append(f"wrote {config}")
    systemctl = shutil.which("systemctl")
    if enable and systemctl:
        for args in (["daemon-reload"], ["enable", "--now", "mnoted.service"]):
            result = subprocess.run([systemctl, "--user", *args], capture_output=True, text=True)
            if result.returncode != 0:
                done.append(f"systemctl --user {' '.join(args)} failed: {result.stderr.strip()}")
                return done, False
        done.append("enabled and started mnoted.service (systemctl --user status mnoted)")
        return done, True
    if enable:
        done.append("systemctl was not found: the unit is written but systemd was not told")
    done.append(
        "enable it with: systemctl --user daemon-reload && "
        "systemctl --user enable --now mnoted.service"
    )
    return done, not enable
