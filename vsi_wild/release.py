"""`vsi-wild release VERSION`: freeze the current export into ``releases/VERSION/``, laid out as a
Hugging Face dataset repository (docs/releases.md).

The folder holds the export's files (the release jsonl, ``qa.parquet``, the splits, the counts, the
ledger), the rendered images, a manifest of the view videos (or the videos, ``--include-videos``),
the lmms-eval task of the release, the dataset card (README.md), the changelog against the previous
release with its causes, and ``manifest.json`` (every file's sha256). Nothing in it depends on when
or where it was made, so the same inputs give the same bytes; a release is never overwritten: made
again with the same content it is left as it is, with other content it is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from vsi_wild.stages import release as rel
from vsi_wild.store import Store, UnitRef

RELEASES = "releases"
HISTORY = "history.txt"  # releases/history.txt: the versions in the order they were made
MANIFEST = "manifest.json"
TASK_DIR = "lmms_eval"
# The export's files a release carries (the rest, links and the ledger's bookkeeping, stay behind).
EXPORT_FILES = (
    "vsi_super_wild_qa.jsonl",
    "qa.parquet",
    "counts.json",
    "ledger.parquet",
    "text_bias.parquet",
    "skipped.parquet",
    "text_debias.parquet",
    "reviewed.parquet",
)


class ReleaseError(Exception):
    """A release that cannot be made (no export, a version taken by other content, a bad version)."""


@dataclass
class Release:
    version: str
    path: Path
    created: bool  # False: the same release was already there
    files: int
    previous: str | None


def _check_version(version: str) -> None:
    if not version or version.startswith(".") or any(c in version for c in "/\\ \t\n") or version in ("..",):
        raise ReleaseError(f"version {version!r}: use a name like v1.0 (no slashes, spaces or leading dot)")


def _current(store: Store, stage: str) -> UnitRef:
    row = store.read_status(stage, "all")
    if row is None or row["state"] != "done":
        raise ReleaseError(
            f"no current {stage} under {store.url}: run `vsi-wild run` first "
            f"({stage}: {row['state'] + (': ' + row['error'] if row['error'] else '') if row else 'not run'})"
        )
    return UnitRef(stage, "all", row["key"])


def _history(root: Path) -> list[str]:
    path = root / HISTORY
    return path.read_text().split() if path.is_file() else []


def _release_rows(path: Path) -> list[dict[str, Any]]:
    return [r for r in pq.read_table(path).to_pylist() if r["split"] == "release"]


def build_folder(
    store: Store, version: str, dest: Path, license_id: str, include_videos: bool, previous: str | None
) -> dict[str, Any]:
    """Write the release into ``dest`` (a new folder); returns its manifest."""
    export = _current(store, "export")
    report_ref = _current(store, "report")
    report = json.loads(store.local_file(report_ref, "report.json").read_text())
    if report.get("build", {}).get("export_key") != export.key:
        raise ReleaseError("the report is of another export: run `vsi-wild run` so that it reports the current one")
    files: dict[str, Path] = {}
    export_files = set(store.files(export))
    for name in EXPORT_FILES:
        if name in export_files:
            files[name] = store.local_file(export, name)
    for name in sorted(export_files):
        if name.startswith("splits/") and (include_videos or "/videos/" not in name):
            files[name] = store.local_file(export, name)
    links = {r["path"]: r["target"] for r in store.read_table(export, "links.parquet").to_pylist()}
    for path, target in sorted(links.items()):
        if path.startswith("images/") or (include_videos and path.startswith("videos/")):
            files[path] = store.local_path_of(target)
    for rel_path, src in files.items():
        out = dest / rel_path
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, out)
    written: dict[str, bytes] = {}
    written["videos.jsonl"] = _videos_manifest(store, links, include_videos)
    # datasets reads one format per repository: the release rows as parquet too (the `default` config)
    import pyarrow as pa
    import pyarrow.compute as pc

    from vsi_wild.digest import table_bytes
    from vsi_wild.stages.export import RELEASE_KEYS

    qa = pq.read_table(dest / "qa.parquet")
    release_rows = qa.filter(pc.equal(qa["split"], pa.scalar("release"))).select(list(RELEASE_KEYS))
    written[rel.RELEASE_PARQUET] = table_bytes(release_rows.replace_schema_metadata(None))
    # the changelog against the previous release
    root = dest.parent
    before = before_build = None
    if previous is not None:
        before = _release_rows(root / previous / "qa.parquet")
        before_build = json.loads((root / previous / "build.json").read_text())
    build = {"export_key": export.key, **{k: report["build"][k] for k in ("stage_versions", "fixes")}}
    after = _release_rows(dest / "qa.parquet")
    log = rel.changelog(before, before_build or {}, after, build, previous)
    written["build.json"] = (json.dumps(build, indent=1, sort_keys=True) + "\n").encode()
    written["changelog.json"] = (json.dumps(log, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()
    written["CHANGELOG.md"] = rel.changelog_markdown(version, log).encode()
    counts = json.loads((dest / "counts.json").read_text())
    task_dir = f"{TASK_DIR}/{rel.task_name(version)}"
    written["README.md"] = rel.card(version, license_id, report, counts, log, include_videos, TASK_DIR, after).encode()
    written[f"{task_dir}/{rel.task_name(version)}.yaml"] = rel.task_yaml(version).encode()
    written[f"{task_dir}/utils.py"] = Path(__file__).with_name("lmms_task_utils.py").read_bytes()
    written["release.json"] = (
        json.dumps(
            {
                "version": version,
                "previous": previous,
                "export_key": export.key,
                "license": license_id,
                "videos_included": include_videos,
            },
            indent=1,
            sort_keys=True,
        )
        + "\n"
    ).encode()
    for rel_path, data in written.items():
        out = dest / rel_path
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
    listed = {p.relative_to(dest).as_posix(): str(p) for p in sorted(dest.rglob("*")) if p.is_file()}
    manifest = rel.manifest(listed)
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def _videos_manifest(store: Store, links: dict[str, str], included: bool) -> bytes:
    """One JSON line per view video: its name, sha256 and size, its source (url, title, licence)."""
    from vsi_wild.digest import sha256_file

    sources: dict[str, dict] = {}
    for row in store.registry().to_pylist():
        sources[row["source_id"]] = row
    lines = []
    for path, target in sorted(links.items()):
        if not path.startswith("videos/"):
            continue
        local = store.local_path_of(target)
        name = path.removeprefix("videos/")
        source_id = name.rsplit("_", 1)[0]
        src = sources.get(source_id, {})
        lines.append(
            json.dumps(
                {
                    "video_name": name,
                    "sha256": sha256_file(local),
                    "bytes": os.path.getsize(local),
                    "source_id": source_id,
                    "origin": src.get("origin"),
                    "url": src.get("url"),
                    "title": src.get("title"),
                    "license": src.get("license"),
                    "in_release": included,
                },
                sort_keys=True,
                ensure_ascii=False,
            )
        )
    return "".join(line + "\n" for line in lines).encode()


def make_release(store: Store, version: str, license_id: str = "cc-by-4.0", include_videos: bool = False) -> Release:
    """Freeze the current export as ``releases/<version>/`` (see the module docstring)."""
    _check_version(version)
    if not store.is_local:
        raise ReleaseError(f"{store.url}: releases are made from a local data root")
    root = Path(store.path(RELEASES))
    root.mkdir(parents=True, exist_ok=True)
    history = _history(root)
    previous = next((v for v in reversed(history) if v != version and (root / v / MANIFEST).is_file()), None)
    final = root / version
    if final.exists() and version in history:  # rebuilt against what it was made from
        made = json.loads((final / "release.json").read_text())
        previous = made["previous"]
    staging = root / f".{version}.tmp-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    try:
        manifest = build_folder(store, version, staging, license_id, include_videos, previous)
        if final.exists():
            existing = json.loads((final / MANIFEST).read_text())
            diff = rel.manifest_difference(existing, manifest)
            if diff:
                raise ReleaseError(
                    f"release {version} exists with other content, and a release never changes: "
                    f"make a new version. " + "; ".join(diff[:10]) + (" ..." if len(diff) > 10 else "")
                )
            return Release(version, final, False, len(manifest) + 1, previous)
        os.rename(staging, final)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    (root / HISTORY).write_text("".join(f"{v}\n" for v in [*history, version]))
    return Release(version, final, True, len(manifest) + 1, previous)


# ----------------------------------------------------------------------------- checks and push
def validate_card(text: str) -> list[str]:
    """Problems of a dataset card by the libraries' own rules, offline: huggingface_hub parses it
    (``DatasetCard``), datasets validates its ``configs`` (``MetadataConfigs``) and knows its task
    categories. (The Hub's own server-side check needs the network: on ``--push``, upload_folder
    asks the Hub's /api/validate-yaml before uploading anything.)"""
    from datasets.utils.metadata import MetadataConfigs, known_task_ids
    from huggingface_hub import DatasetCard

    problems = []
    try:
        card = DatasetCard(text)
    except ValueError as e:
        return [f"huggingface_hub cannot read the card: {e}"]
    data = card.data.to_dict()
    try:
        MetadataConfigs.from_dataset_card_data(card.data)
    except ValueError as e:
        problems.append(f"configs: {e}")
    for t in data.get("task_categories") or []:
        if t not in known_task_ids:
            problems.append(f"task_categories: {t!r} is not a known task id")
    for key in ("license", "pretty_name", "configs"):
        if not data.get(key):
            problems.append(f"{key} is missing")
    return problems


def push(
    folder: Path,
    repo_id: str,
    version: str,
    token: str | None = None,
    endpoint: str | None = None,
    private: bool = False,
) -> str:
    """Upload a release folder to the Hugging Face dataset repository ``repo_id`` and tag the commit
    with the version. The token is ``HF_TOKEN`` unless given; the Hub is ``HF_ENDPOINT``'s (default
    huggingface.co) unless ``endpoint`` is given. Returns the commit's URL."""
    from huggingface_hub import HfApi

    token = token or os.environ.get("HF_TOKEN")
    if not token:
        raise ReleaseError("pushing needs a Hugging Face token with write access: set HF_TOKEN")
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise ReleaseError("HF_HUB_OFFLINE is set (the Makefile sets it): unset it, or HF_HUB_OFFLINE=0, to push")
    api = HfApi(endpoint=endpoint, token=token)
    api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
    # upload_folder has the Hub validate README.md's metadata (its /api/validate-yaml) before uploading
    info = api.upload_folder(
        folder_path=str(folder),
        repo_id=repo_id,
        repo_type="dataset",
        commit_message=f"VSI-Super-Wild {version} (vsi-wild release)",
    )
    api.create_tag(
        repo_id, tag=version, repo_type="dataset", revision=info.oid, tag_message=f"VSI-Super-Wild {version}"
    )
    return str(info.commit_url)
