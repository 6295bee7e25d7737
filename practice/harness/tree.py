"""tree.py — the files a verdict depends on: snapshot, fresh copy, verification, restoration.

`judge.py` snapshots practice/ and minillm/ (everything but the reader's workspace and caches)
into memory before a run, and the test process runs from a fresh copy of that snapshot in a temp
folder. After the run both the copy and the real tree are compared with the snapshot byte for
byte. A change to the copy fails the run. A change to the real tree fails it too when the code
under test could write files (no namespace sandbox): the files are put back as they were, and
the versions replaced are kept in a temp folder, in case the change was an author's edit made
during the run. So nothing the reader's code writes can decide this verdict or a later one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from protocol import TRUSTED_DIRS, UNTRUSTED_PARTS


def _walk(root: Path):
    """(relative path, full path) of every entry under the trusted folders, caches and workspace
    left out."""
    for top in TRUSTED_DIRS:
        base = root / top
        if not base.exists():
            continue
        for folder, dirs, files in os.walk(base, followlinks=False):
            dirs[:] = sorted(d for d in dirs if d not in UNTRUSTED_PARTS)
            for name in sorted(files) + [
                d for d in dirs if os.path.islink(os.path.join(folder, d))
            ]:
                full = Path(folder, name)
                yield full.relative_to(root).as_posix(), full


@dataclass
class TreeReport:
    files: int = 0
    digest: str = ""
    changed: list[str] = field(
        default_factory=list
    )  # relative paths that differed after the run: a failure
    backup: str | None = None  # where the changed versions were kept when they were put back
    elsewhere: list[str] = field(
        default_factory=list
    )  # changed, but not by the code under test (it could not write)

    @property
    def ok(self) -> bool:
        return not self.changed


class Snapshot:
    def __init__(self, root: Path):
        self.root = root
        self.files: dict[str, bytes] = {}
        self.modes: dict[str, int] = {}
        for rel, full in _walk(root):
            if full.is_symlink() or not full.is_file():
                continue
            self.files[rel] = full.read_bytes()
            self.modes[rel] = stat.S_IMODE(full.stat().st_mode)
        h = hashlib.sha256()
        for rel in sorted(self.files):
            h.update(rel.encode() + b"\0" + hashlib.sha256(self.files[rel]).digest())
        self.digest = h.hexdigest()

    def write_to(self, dest: Path) -> None:
        for rel, data in self.files.items():
            path = dest / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            path.chmod(self.modes[rel])

    def differences(self, root: Path) -> list[str]:
        """Paths under root that are not exactly as in the snapshot (changed, added,
        removed)."""
        seen, diff = set(), []
        for rel, full in _walk(root):
            seen.add(rel)
            if full.is_symlink() or not full.is_file() or rel not in self.files:
                diff.append(rel)
            else:
                try:
                    if full.read_bytes() != self.files[rel]:
                        diff.append(rel)
                except OSError:
                    diff.append(rel)
        diff += [rel for rel in self.files if rel not in seen]
        return sorted(set(diff))

    def restore(self, root: Path, paths: list[str], backup: Path | None = None) -> None:
        """Put every listed path back as it was in the snapshot (removing what was not there),
        keeping the
        versions it replaces under `backup`: the change may have been someone's edit made
        during the run."""
        for rel in paths:
            path = root / rel
            if backup is not None and path.is_file() and not path.is_symlink():
                (backup / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, backup / rel)
            if path.is_symlink() or path.is_file():
                path.unlink()
            elif path.is_dir():
                shutil.rmtree(path)
            if rel in self.files:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(self.files[rel])
                path.chmod(self.modes[rel])
        kept = {str(Path(rel).parent) for rel in self.files}
        kept |= {str(p) for rel in kept for p in Path(rel).parents}
        for top in TRUSTED_DIRS:  # folders the reader's code created, now empty
            for folder, _dirs, _ in os.walk(root / top, topdown=False):
                rel = Path(folder).relative_to(root).as_posix()
                if (
                    rel not in kept
                    and not set(Path(rel).parts) & set(UNTRUSTED_PARTS)
                    and not os.listdir(folder)
                ):
                    os.rmdir(folder)

    def verify(self, root: Path, backup_prefix: str = "minillm-judge-replaced-") -> TreeReport:
        """Compare root with the snapshot and put back what differs, keeping the replaced
        versions."""
        changed, backup = self.differences(root), None
        if changed:
            backup = Path(tempfile.mkdtemp(prefix=backup_prefix))
            self.restore(root, changed, backup)
        return TreeReport(
            len(self.files), self.digest, changed, str(backup) if backup else None
        )
