"""Add the δ replays of a device session to a version-2 digest written on the device.

A device store is lost when the machine goes back; what comes back is the digest and the store's
replay.json files in one tar (collect.sh). Digests written by code older than format version 3
carry no replay; this writes the version-3 digest `flashprobe digest` would have written on the
device: each cell that has a replay.json in the tar (matched by its folder, `<variant>--<key>`)
gets the same compact replay (`reporting.digest.replay.compact`).

    python scripts/device/attach_replays.py DIGEST.json REPLAYS.tgz OUT.json
"""

from __future__ import annotations

import json
import sys
import tarfile
from pathlib import Path

from flashprobe.reporting.digest import replay as rp


def main(digest_path: str, tar_path: str, out_path: str) -> None:
    digest = json.loads(Path(digest_path).read_text())
    if digest.get("version") != 2:
        sys.exit(f"{digest_path}: digest version {digest.get('version')}, this adds to version 2")
    replays: dict[str, dict] = {}
    with tarfile.open(tar_path) as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            # STORE/<suite>/<cell>/replay.json is a cell's; STORE/<suite>/replay.json the suite's
            if member.isfile() and parts[-1] == "replay.json" and "--" in parts[-2]:
                data = tar.extractfile(member)
                assert data is not None
                replays[parts[-2]] = json.loads(data.read())
    attached = []
    for cell in digest["cells"]:
        meta = cell["meta"]
        name = f"{meta['variant']}--{meta['key']}"
        doc = replays.pop(name, None)
        cell["replay"] = rp.compact(doc) if doc is not None else None
        if doc is not None:
            attached.append(name)
    if replays:
        sys.exit(f"replays with no cell in {digest_path}: {sorted(replays)}")
    digest["version"] = 3
    Path(out_path).write_text(json.dumps(digest, separators=(",", ":")) + "\n")
    print(f"{out_path}: replay attached to {', '.join(attached) or 'no cell'}")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
