"""Where the test inputs are: one definition for the whole Python suite."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: Small checkpoints written by ORT 1.19.2 (scripts/make_fixtures.py), committed with the repository.
DATA = REPO / "tests" / "data"
#: The corpus of ORT-written checkpoints and their JSON manifests, committed with the repository (the
#: Rust side's twin is ``test_support::ort_corpus_dir`` in rust/core).
CORPUS_DIR = DATA / "corpus"
#: A training artifact set ORT wrote (scripts/make_artifact_fixtures.py): models, checkpoints, an
#: adapter; the files the README's and the docs' code blocks run on.
ARTIFACTS = DATA / "artifacts"


def corpus_files() -> list[Path]:
    """Every ``*.ckpt`` of the corpus, sorted."""
    return sorted(CORPUS_DIR.glob("*.ckpt"))


def fixture_files(pattern: str = "*.ckpt") -> list[Path]:
    """The checkpoints of tests/data matching ``pattern``, sorted."""
    return sorted(DATA.glob(pattern))


def artifact_checkpoints() -> list[Path]:
    """The checkpoints of the artifact set (each has a ``.json`` manifest beside it)."""
    return sorted(
        p.with_suffix("") if p.stem == "checkpoint" else p.with_suffix(".ckpt")
        for p in ARTIFACTS.rglob("*.json")
        if p.name != "files.json"
    )


def ort_written_files() -> list[Path]:
    """The corpus, then tests/data: every checkpoint ORT wrote that the suite has."""
    return corpus_files() + fixture_files()
