"""Published sidecars: where they live on the Hub, reading them (training), pushing them (maintainers).

- **Dataset repositories**: branch ``lerobot-sidecars`` of the same repository, file
  ``meta/mp4-sidecars/mp4-v<schema>-<source commit>.npz``. The name carries the commit the video
  payload is pinned to, so a tag and the commit it resolves to find the same file; source branches
  and tags are never touched (the branch is created from the source commit on first push).
- **Storage Buckets**: ``meta/mp4-sidecars/mp4-v<schema>.npz`` in the bucket itself (no branch);
  its per-video content fingerprints are checked against the bucket's current listing.

Reading (:func:`open_published`) issues only GET/HEAD requests. Writing (:func:`push_sidecar`)
happens only on the maintainer's explicit ``--push``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from lerobotstream import constants
from lerobotstream.errors import SidecarError, SidecarPublishError, SourceNotFoundError
from lerobotstream.mp4._npz_schema import SIDECAR_SCHEMA_VERSION
from lerobotstream.sidecar._identity import check_identity, sidecar_identity

logger = logging.getLogger("lerobotstream.sidecar")


def published_path(repo_type: str, commit: str | None, *, schema_version: int = SIDECAR_SCHEMA_VERSION) -> str:
    """Path of the published sidecar of schema ``schema_version`` inside the branch (datasets) or
    bucket.

    Raises:
        SidecarPublishError: a dataset without a pinned 40-hex source commit.
    """
    if repo_type == "bucket":
        return f"{constants.BUCKET_SIDECAR_DIR}/mp4-v{schema_version}.npz"
    if not commit or len(commit) != 40:
        raise SidecarPublishError(f"a published dataset sidecar is named by its pinned source commit; got {commit!r}")
    return f"{constants.BUCKET_SIDECAR_DIR}/mp4-v{schema_version}-{commit}.npz"


def _address(source: Any, path: str) -> str:
    """The ``hf://`` address of ``path`` in the bucket, or in the sidecar branch of the dataset."""
    if source.repo_type == "bucket":
        return f"hf://buckets/{source.repo_id}/{path}"
    return f"hf://datasets/{source.repo_id}@{constants.SIDECAR_BRANCH}/{path}"


def _is_hub(source: Any) -> bool:
    from lerobotstream.sources._hub import HubSource

    return isinstance(source, HubSource)


def open_published(source: Any, identity: Any) -> tuple[Any, str, str] | None:
    """Where the published sidecar of ``identity`` can be read, or None when there is none.

    Returns:
        ``(byte_source, path, display)``: read ``path`` through ``byte_source``; ``display`` names
        it for logs. None for non-Hub sources, a missing branch, or a missing file.

    Raises:
        SourceError: the store failed in another way (callers log it and build).
    """
    if not _is_hub(source):
        return None
    path = published_path(source.repo_type, getattr(source, "commit", None))
    try:
        store = source if source.repo_type == "bucket" else source.at_revision(constants.SIDECAR_BRANCH)
    except SourceNotFoundError:
        return None  # no sidecar branch
    return (store, path, _address(source, path)) if store.exists(path) else None


def push_sidecar(
    npz_path: str | os.PathLike,
    source: Any,
    meta: Any = None,
    *,
    api: Any = None,
    tolerance_s: float = constants.DEFAULT_TOLERANCE_S,
) -> str:
    """Publish a sidecar after validating it against the full dataset. Maintainers only.

    Only a complete (not subset), current-schema sidecar that indexes every video of ``source``
    with matching sizes and fingerprints (and, for datasets, the source's pinned commit) and that
    passes validation against every episode's metadata may be pushed.

    Args:
        npz_path: the sidecar to publish.
        source: ``HubSource`` of the dataset (pinned to a commit) or bucket it describes.
        meta: ``DatasetMeta`` of the **full** dataset (default: loaded from ``source``).
        api: an ``HfApi`` (default: one with the source's endpoint and token). Datasets use
            ``create_branch(..., revision=<source commit>, exist_ok=True)`` then ``upload_file(...,
            revision="lerobot-sidecars")``; buckets ``batch_bucket_files(add=[...])``.
        tolerance_s: allowed timestamp error, seconds.

    Returns:
        The ``hf://`` address of the published file.

    Raises:
        SidecarPublishError: not an ``hf://`` source, a subset sidecar, or it does not match the source.
        SidecarSchemaError / SidecarValidationError: the file is of an older schema or invalid.
    """
    from lerobotstream.sidecar._archive import load_manifest
    from lerobotstream.sidecar._validate import validate_sidecar_file

    npz_path = Path(npz_path)
    if not _is_hub(source):
        raise SidecarPublishError(
            f"--push needs an hf:// data root (a Hub dataset pinned to a commit, or a bucket); "
            f"got {getattr(source, 'root_display', source)!r}"
        )
    manifest = load_manifest(npz_path)  # SidecarSchemaError for another schema: rebuild before publishing
    if manifest.get("subset"):
        raise SidecarPublishError(
            f"only a complete dataset sidecar can be published: {npz_path} indexes {len(manifest.get('episodes') or [])} "
            f"of {manifest.get('total_episodes')} episodes; rebuild it without --episodes",
            path=str(npz_path),
        )
    if meta is None:
        from lerobotstream.meta import DatasetMeta

        meta = DatasetMeta.load(source, repo_id=source.repo_id)
    if len(meta.episodes) != int(meta.total_episodes):
        raise SidecarPublishError("push_sidecar needs the metadata of the full dataset, not a selection")
    identity = sidecar_identity(source, meta, repo_id=source.repo_id, repo_type=source.repo_type)
    if source.repo_type == "dataset" and identity.commit is None:
        raise SidecarPublishError(f"{source.root_display} is not pinned to a commit")
    reason = check_identity(manifest, identity, require_fingerprints=True)
    if reason is not None:
        raise SidecarPublishError(f"{npz_path} does not describe {source.root_display}: {reason}", path=str(npz_path))
    try:
        validate_sidecar_file(
            npz_path,
            meta,
            tolerance_s=tolerance_s,
            index_dir=None,
            lock_timeout_s=constants.DEFAULT_SIDECAR_LOCK_TIMEOUT_S,
        )
    except SidecarError as e:
        raise SidecarPublishError(f"{npz_path} failed validation, not publishing: {e}", path=str(npz_path)) from e
    api = source.api if api is None else api
    path = published_path(source.repo_type, identity.commit)
    if source.repo_type == "bucket":
        api.batch_bucket_files(source.repo_id, add=[(str(npz_path), path)])
    else:
        api.create_branch(
            source.repo_id,
            repo_type="dataset",
            branch=constants.SIDECAR_BRANCH,
            revision=identity.commit,
            exist_ok=True,
        )
        api.upload_file(
            path_or_fileobj=str(npz_path),
            path_in_repo=path,
            repo_id=source.repo_id,
            repo_type="dataset",
            revision=constants.SIDECAR_BRANCH,
            commit_message=f"MP4 sidecar (schema {SIDECAR_SCHEMA_VERSION}) for {identity.commit}",
        )
    where = _address(source, path)
    logger.info("published %s as %s", npz_path, where)
    return where
