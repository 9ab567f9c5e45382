"""A child that runs one sync cycle of a workspace with a crash point armed (SIGKILL there).

python tests/remote/crash_sync.py ROOT STEP
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mnoted.store import faults
from tests.remote.test_sync import Device

if __name__ == "__main__":
    device = Device(Path(sys.argv[1]), "laptop")
    faults.arm(sys.argv[2])
    device.sync.cycle()
    device.ws.close()
    print("completed")
