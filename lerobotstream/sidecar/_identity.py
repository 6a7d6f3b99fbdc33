"""What a sidecar must describe, and whether a manifest describes it: the identity of a dataset
selection at one source state. Shared by ``_lifecycle`` (the cache key, cached and published
candidates) and ``_publish`` (only a sidecar matching the full dataset is pushed).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from lerobotstream.errors import Mp4Error, Mp4InconsistentTablesError, RangeReadError, SourceChangedError, SourceError
from lerobotstream.mp4._npz_schema import READABLE_SCHEMA_VERSIONS, SIDECAR_SCHEMA_VERSION

_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")


@dataclass(kw_only=True)
class SidecarIdentity:
    """What a sidecar must describe: the selection of a dataset at one source state.

    Attributes:
        repo_id, repo_type: the dataset (``"dataset"`` or ``"bucket"``; local and other roots
            use ``"dataset"``).
        commit: the 40-hex commit the payload reads are pinned to (Hub datasets), else None.
        revision: the revision recorded in a built sidecar (``commit`` when known).
        data_root: the root without credentials (``ByteSource.root_display``).
        episodes: the selected episode indices when they are a subset, None for the full dataset.
        files: ``[(path, size_bytes, fingerprint or None)]`` of every selected video, sorted.
    """

    repo_id: str
    repo_type: str
    commit: str | None
    revision: str | None
    data_root: str
    episodes: list[int] | None
    files: list[tuple[str, int, str | None]]

    @property
    def stable(self) -> bool:
        """False when some video has no fingerprint and no commit pins it (rebuilt at each open)."""
        return self.commit is not None or all(fp is not None for _, _, fp in self.files)

    def digest(self) -> str:
        """SHA-256 of the canonical JSON of the key fields (hex)."""
        key = {
            "schema_version": SIDECAR_SCHEMA_VERSION,
            "repo_type": self.repo_type,
            "repo_id": self.repo_id,
            "commit": self.commit,
            "data_root": self.data_root,
            "episodes": self.episodes,
            # a commit pins the contents; otherwise the listing is the identity
            "files": None if self.commit is not None else [list(f) for f in self.files],
        }
        return hashlib.sha256(json.dumps(key, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def sidecar_identity(
    source: Any, meta: Any, *, repo_id: str, revision: str | None = None, repo_type: str = "dataset"
) -> SidecarIdentity:
    """The identity of ``meta``'s selection at ``source``'s current state (one size and
    fingerprint look-up per selected video; Hub sources answer from one listing per folder).

    Raises:
        SourceError: a video cannot be listed (names it).
    """
    commit = getattr(source, "commit", None)
    if commit is not None and not _COMMIT_RE.match(str(commit)):
        commit = None
    if (
        commit is None
        and revision is not None
        and _COMMIT_RE.match(revision)
        and repo_type == "dataset"
        and getattr(source, "repo_type", None) == "dataset"
    ):
        commit = revision
    selected = [int(ep.episode_index) for ep in meta.episodes]
    subset = selected != list(range(int(meta.total_episodes)))
    files = [(path, int(source.size(path)), source.fingerprint(path)) for path in sorted(set(meta.video_paths()))]
    return SidecarIdentity(
        repo_id=repo_id,
        repo_type=repo_type,
        commit=commit,
        revision=commit if commit is not None else revision,
        data_root=str(getattr(source, "root_display", "") or ""),
        episodes=selected if subset else None,
        files=files,
    )


def check_identity(
    manifest: dict[str, Any], identity: SidecarIdentity, *, require_fingerprints: bool = False
) -> str | None:
    """Why the sidecar with ``manifest`` does not describe ``identity`` (None when it does).

    Checks schema, repository, commit (when the identity has one), episode coverage, and for every
    selected video: present, same size, same fingerprint (a sidecar fingerprint that is null is
    accepted only when a commit pins the contents and ``require_fingerprints`` is False).
    """
    if manifest.get("schema_version") not in READABLE_SCHEMA_VERSIONS:
        return (
            f"schema version {manifest.get('schema_version')} (this reader opens "
            f"{' and '.join(map(str, READABLE_SCHEMA_VERSIONS))})"
        )
    if manifest.get("repo_id") not in (None, identity.repo_id):
        return f"it indexes {manifest.get('repo_id')!r}, not {identity.repo_id!r}"
    if identity.commit is not None and manifest.get("revision") != identity.commit:
        return f"it indexes revision {manifest.get('revision')!r}, the source is pinned to {identity.commit}"
    if manifest.get("subset"):
        have = set(int(e) for e in (manifest.get("episodes") or []))
        if identity.episodes is None:
            return f"it indexes a subset of {len(have)} episodes, the full dataset is selected"
        missing = sorted(set(identity.episodes) - have)
        if missing:
            return f"it indexes a subset of {len(have)} episodes that misses episodes {missing[:8]}"
    sources = manifest["sources"]  # a SourceTable (load_manifest)
    for path, size, fp in identity.files:  # only the selected videos: no object per other source
        i = sources.find(path)
        if i is None:
            return f"it does not index {path}"
        have_size = sources.get(i, "size")
        if have_size is not None and int(have_size) != size:
            return f"{path}: the sidecar says {have_size} bytes, the source has {size}"
        have = sources.get(i, "fingerprint")
        if have is None:
            if require_fingerprints or (identity.commit is None and fp is not None):
                return f"{path}: the sidecar has no content fingerprint to check against the source"
        elif fp is not None and have != fp:
            return f"{path}: content fingerprint changed ({have} -> {fp})"
    return None


def explain_payload_failure(exc: Any, source: Any, index: Any, path: str, sidecar_path: Any) -> Any:
    """The error to report when a video's payload read or framing check failed mid-run.

    A file replaced during the run shows up as bytes that do not frame
    (``Mp4InconsistentTablesError``), a header that no longer parses (``Mp4Error``) or a short
    read (``RangeReadError``). When the source's size or fingerprint differs from the sidecar's
    record of ``path``: a :class:`~lerobotstream.errors.SourceChangedError`. When they match, a
    framing error's message says to delete the sidecar (a replacement of the same size and mtime).

    Args:
        exc: the ``LeRobotStreamError`` raised by the read or the framing check.
        source: the payload ``ByteSource``; index: the open ``Mp4Index``; sidecar_path: its file.

    Returns:
        the exception to raise (``exc`` itself when nothing more can be said).
    """
    if not isinstance(exc, (Mp4Error, RangeReadError)):
        return exc
    try:
        rec = index.source_info(index.source_id(path))
        size, fp = int(source.size(path)), source.fingerprint(path)
    except (KeyError, SourceError, OSError, ValueError):
        rec = None
    if rec is not None:
        had_size, had_fp = rec.get("size"), rec.get("fingerprint")
        if (had_size is not None and int(had_size) != size) or (had_fp and fp and had_fp != fp):
            return SourceChangedError(
                f"{path}: the file changed during the run (the sidecar {sidecar_path} indexed {had_size} bytes, "
                f"{had_fp}; it now has {size} bytes, {fp}), so its bytes no longer match the index ({exc.message}). "
                "The dataset's files must not change while it is read: restart once the new version is complete "
                "(the sidecar is then rebuilt)",
                **{**exc.fields, "path": path},
            )
    if not isinstance(exc, Mp4InconsistentTablesError):
        return exc
    more = (
        ""
        if rec is None
        else f". The file still has the size and fingerprint the sidecar recorded ({fp}): if it was replaced by "
        "another file of the same size and mtime, the sidecar describes the old one: delete that sidecar file (it "
        "is rebuilt at the next start), and do not change dataset files during a run"
    )
    return type(exc)(f"{exc.message} [cached sidecar: {sidecar_path}]{more}", **exc.fields)
