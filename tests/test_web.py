"""The browser checkpoint viewer (web/) and its JavaScript API (rust/wasm), in a real headless
Chromium driven by selenium: the page is served from 127.0.0.1, checkpoints are given to its file
input, and what it shows is compared with the Python reader's values (ortckpt.load + numpy).

Needs the compiled files (scripts/build_web.sh, which scripts/test.sh runs first) and Debian's
chromium + chromium-driver (scripts/setup_browser.sh installs them; skipped, with that reason, only
where they are absent)."""

from __future__ import annotations

import functools
import http.server
import json
import math
import os
import pathlib
import shutil
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointState, OptimizerGroup

REPO = pathlib.Path(__file__).resolve().parent.parent
WEB = REPO / "web"
CORPUS = REPO / "tests" / "data" / "corpus"
CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER") or shutil.which("chromedriver")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="no chromium / chromedriver (apt-get install chromium chromium-driver; scripts/setup_browser.sh)",
)

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

BINS = 50  # the viewer's histogram bins (web/viewer.js HISTOGRAM_BINS)


class _Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map: ClassVar[dict[str, str]] = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".wasm": "application/wasm",
    }

    def log_message(self, format: str, *args: Any) -> None:  # quiet test output
        pass


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    if not (WEB / "pkg" / "ortckpt_wasm_bg.wasm").exists():
        pytest.fail("web/pkg/ is missing: run scripts/build_web.sh (scripts/test.sh does)")
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Handler, directory=str(WEB))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/index.html"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1600"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    driver.set_script_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def page(browser: Any, url: str) -> Any:
    """A fresh viewer, its WebAssembly module loaded."""
    browser.get(url)
    WebDriverWait(browser, 20).until(
        lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-state")
    )
    assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-state") == "ready"
    return browser


def drop(driver: Any, *paths: pathlib.Path) -> str:
    """Gives `paths` to the page's file input; waits for the load and returns its state."""
    body = driver.find_element(By.TAG_NAME, "body")
    before = int(body.get_attribute("data-loads") or 0)
    driver.find_element(By.ID, "files").send_keys("\n".join(str(p) for p in paths))
    WebDriverWait(driver, 20).until(lambda d: int(body.get_attribute("data-loads") or 0) == before + 1)
    return str(body.get_attribute("data-state"))


def table(driver: Any, table_id: str) -> list[dict[str, Any]]:
    """Rows of a table as shown: dataset attributes, and each cell's exact value and text."""
    rows: list[dict[str, Any]] = driver.execute_script(
        """return [...document.querySelectorAll(`#${arguments[0]} tbody tr`)].map(tr => ({
             data: {...tr.dataset}, hidden: tr.hidden,
             cells: [...tr.cells].map(td => [td.dataset.value, td.textContent])}))""",
        table_id,
    )
    return rows


def error_text(driver: Any) -> str:
    box = driver.find_element(By.ID, "error")
    return "" if box.get_attribute("hidden") is not None else str(box.text)


def num(value: str) -> float:
    return float(value) if value else math.nan


def expected_tensors(state: CheckpointState) -> dict[str, tuple[str, Any]]:
    """key -> (kind, values or a nominal Parameter) as the viewer keys them."""
    out: dict[str, tuple[str, Any]] = {}
    for name, p in state.parameters.items():
        out[name] = ("trainable" if p.trainable else "frozen", p if p.is_nominal else p.data)
    for group_name, group in (state.optimizer or {}).items():
        for param, momentums in group.states.items():
            for m, values in momentums.items():
                out[f"{group_name}/{param}/{m}"] = ("optimizer", values)
    return out


def check_tensor_table(driver: Any, state: CheckpointState) -> None:
    rows = table(driver, "tensors")
    expected = expected_tensors(state)
    assert sorted(r["data"]["key"] for r in rows) == sorted(expected)
    for r in rows:
        key = r["data"]["key"]
        kind, values = expected[key]
        (name, _), (kind_shown, _), (dtype, _), (shape, _), (size, _), *stat_cells = r["cells"]
        assert (name, kind_shown, r["data"]["kind"]) == (key, kind, kind), key
        if not isinstance(values, np.ndarray):  # nominal: type only, no values nor statistics
            assert dtype == str(values.dtype) and all(v == "" for v, _ in stat_cells), key
            continue
        assert dtype == str(values.dtype), key
        assert json.loads(shape) == list(values.shape), key
        assert int(size) == values.size, key
        a = np.asarray(values).ravel().astype(np.float64)
        finite = a[np.isfinite(a)]
        shown = {c: num(v) for c, (v, _) in zip(("min", "max", "mean", "std", "nan", "inf"), stat_cells)}
        assert shown["nan"] == np.isnan(a).sum() and shown["inf"] == np.isinf(a).sum(), key
        if finite.size:
            assert (shown["min"], shown["max"]) == (finite.min(), finite.max()), key
            assert shown["mean"] == pytest.approx(finite.mean(), rel=1e-12, abs=1e-300), key
            assert shown["std"] == pytest.approx(finite.std(), rel=1e-9, abs=1e-300), key
        else:
            assert all(math.isnan(shown[c]) for c in ("min", "max", "mean", "std")), key


# --- the corpus, as ORT wrote it --------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["ort_adamw_with_optimizer", "ort_sgd_with_optimizer", "ort_adamw_params_only", "ort_nominal"],
)
def test_corpus_checkpoint_shows_what_the_python_reader_reads(page: Any, name: str) -> None:
    path = CORPUS / f"{name}.ckpt"
    assert drop(page, path) == "loaded", error_text(page)
    state = ortckpt.load(path)
    check_tensor_table(page, state)
    shown_props = {r["data"]["name"]: (r["cells"][1][0], r["cells"][2][0]) for r in table(page, "properties")}
    kinds = {int: "int", float: "float", str: "string"}
    assert shown_props.keys() == set(state.properties)
    for k, v in state.properties.items():
        kind, shown_value = shown_props[k]
        assert kind == kinds[type(v)], k
        assert (shown_value if isinstance(v, str) else float(shown_value)) == v, k
    groups = {r["data"]["group"]: [c[0] for c in r["cells"]] for r in table(page, "optimizer")}
    expected_groups = {
        g: [g, str(o.step), None, str(len(o.states)), str(sum(len(m) for m in o.states.values()))]
        for g, o in (state.optimizer or {}).items()
    }
    assert groups.keys() == expected_groups.keys()
    for g, cells in groups.items():
        assert cells[:2] + cells[3:] == expected_groups[g][:2] + expected_groups[g][3:]
        assert np.float32(float(cells[2])) == np.float32((state.optimizer or {})[g].initial_learning_rate)
    summary = page.find_element(By.CSS_SELECTOR, ".summary").text
    assert f"format version {state.version}" in summary and ("nominal" in summary) == state.is_nominal


def test_every_dtype_and_special_values(page: Any) -> None:
    """Integers of every width, bool, float64, NaN and infinities, empty and scalar tensors."""
    path = REPO / "tests" / "data" / "dtypes.ckpt"
    assert drop(page, path) == "loaded", error_text(page)
    check_tensor_table(page, ortckpt.load(path))


def test_histogram_and_detail_match_numpy(page: Any) -> None:
    path = CORPUS / "ort_adamw_with_optimizer.ckpt"
    state = ortckpt.load(path)
    drop(page, path)
    for key in ("fc1.weight", "group0/fc2.weight/momentum1"):
        page.find_element(By.CSS_SELECTOR, f'#tensors tr[data-key="{key}"]').click()
        assert page.find_element(By.ID, "detail-name").text == key
        _, values = expected_tensors(state)[key]
        a = np.asarray(values, dtype=np.float64).ravel()
        counts, _ = np.histogram(a, bins=BINS, range=(a.min(), a.max()))
        shown = json.loads(page.find_element(By.ID, "histogram").get_attribute("data-counts"))
        assert shown == counts.tolist(), key
        stats = page.execute_script(
            "return Object.fromEntries([...document.querySelectorAll('#detail-stats dd')]"
            ".map(dd => [dd.dataset.stat, dd.dataset.value]))"
        )
        assert (
            int(stats["count"]) == a.size
            and float(stats["min"]) == a.min()
            and float(stats["max"]) == a.max()
        )
        preview = page.find_element(By.ID, "detail-values").text
        assert preview.startswith("[") and len(preview) > 2


def test_columns_sort(page: Any) -> None:
    drop(page, CORPUS / "ort_adamw_with_optimizer.ckpt")
    header = page.find_element(By.CSS_SELECTOR, '#tensors th[data-col="size"]')
    header.click()
    sizes = [int(r["cells"][4][0]) for r in table(page, "tensors")]
    assert sizes == sorted(sizes)
    header.click()
    sizes = [int(r["cells"][4][0]) for r in table(page, "tensors")]
    assert sizes == sorted(sizes, reverse=True)
    page.find_element(By.CSS_SELECTOR, '#tensors th[data-col="key"]').click()
    keys = [r["data"]["key"] for r in table(page, "tensors")]
    assert keys == sorted(keys, key=str.lower) or keys == sorted(keys)


# --- files the viewer must pair or take apart -------------------------------------------------------


def _mlp(seed: int) -> CheckpointState:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((64, 32)).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    return CheckpointState(
        {"fc.weight": w},
        frozen={"fc.bias": b},
        optimizer={
            "group0": OptimizerGroup(
                step=7, initial_learning_rate=0.01, states={"fc.weight": {"momentum0": np.ones_like(w)}}
            )
        },
        properties={"epoch": 7},
    )


def test_external_data_pairs_with_its_checkpoint(page: Any, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "big.ckpt"
    ortckpt.save(_mlp(1), path, external_data_threshold=0)
    state = ortckpt.load(path)
    data = pathlib.Path(ortckpt.external_data_path(path))
    assert state.has_external_data and data.exists()
    assert drop(page, path, data) == "loaded", error_text(page)
    check_tensor_table(page, state)
    assert "external data: big.ckpt.data" in page.find_element(By.CSS_SELECTOR, ".summary").text
    # The checkpoint alone: the core's error, and the page keeps working.
    assert drop(page, path) == "error"
    assert error_text(page) == (
        "big.ckpt: checkpoint has external data but its external data file big.ckpt.data "
        "(drop it together with the checkpoint) is missing"
    )
    assert drop(page, CORPUS / "ort_sgd_params_only.ckpt") == "loaded" and error_text(page) == ""


def test_odd_names_are_shown_as_text(page: Any, tmp_path: pathlib.Path) -> None:
    names = ["<b>bold</b>", 'quote"d', "slash/ed name", "ünïcödé ✓", "a" * 300, "tab\tname"]
    state = CheckpointState({n: np.arange(i + 1, dtype=np.float32) for i, n in enumerate(names)})
    # an empty tensor with a dim beyond 2^53 (a BigInt in JavaScript), shown exactly
    state.parameters["huge dim"] = ortckpt.Parameter("huge dim", np.zeros((0, 2**60), np.float32))
    state.properties["<script>alert(1)</script>"] = "x & y"
    path = tmp_path / "odd names ✓.ckpt"
    ortckpt.save(state, path)
    assert drop(page, path) == "loaded", error_text(page)
    check_tensor_table(page, ortckpt.load(path))
    assert page.find_elements(By.CSS_SELECTOR, "#tensors b") == []  # markup in names stays text
    props = table(page, "properties")
    assert [(r["data"]["name"], r["cells"][2][1]) for r in props] == [("<script>alert(1)</script>", "x & y")]


# --- two rounds -------------------------------------------------------------------------------------


def test_diff_of_two_rounds_names_the_changed_tensors(page: Any, tmp_path: pathlib.Path) -> None:
    first = _mlp(2)
    second = _mlp(2)
    w = first.parameters["fc.weight"].data.copy()
    w[3, 5] += 0.5
    w[10] *= 2
    second.parameters["fc.weight"].data = w
    second.parameters["extra"] = ortckpt.Parameter("extra", np.zeros(3, np.float32))
    a, b = tmp_path / "round1.ckpt", tmp_path / "round2.ckpt"
    ortckpt.save(first, a)
    ortckpt.save(second, b)
    assert drop(page, a, b) == "loaded", error_text(page)
    rows = {r["data"]["key"]: r for r in table(page, "diff")}
    status = {k: r["data"]["status"] for k, r in rows.items()}
    assert status == {
        "fc.weight": "changed",
        "fc.bias": "same",
        "group0/fc.weight/momentum0": "same",
        "extra": "added",
    }
    old = first.parameters["fc.weight"].data.astype(np.float64)
    new = w.astype(np.float64)
    cells = {c: v for c, (v, _) in zip(("changed", "max", "rel"), rows["fc.weight"]["cells"][3:])}
    assert int(cells["changed"]) == int((old != new).sum())
    assert float(cells["max"]) == np.abs(new - old).max()
    rel = np.linalg.norm(new - old) / np.linalg.norm(old)
    assert float(cells["rel"]) == pytest.approx(rel, rel=1e-12)
    summary = page.find_element(By.ID, "diff-summary").text
    assert summary.startswith("1 of 4 tensors changed")
    page.find_element(By.ID, "diff-changed-only").click()
    visible = [r["data"]["key"] for r in table(page, "diff") if not r["hidden"]]
    assert sorted(visible) == ["extra", "fc.weight"]
    # The second checkpoint's own tables are one click away.
    page.find_element(By.CSS_SELECTOR, 'input[name="which"][value="1"]').click()
    check_tensor_table(page, ortckpt.load(b))


# --- malformed input --------------------------------------------------------------------------------


def _onnx_model(path: pathlib.Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [])
    graph.output.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, [1]))
    onnx.save(helper.make_model(graph), path)


def test_malformed_files_show_the_core_error_and_the_page_works_on(page: Any, tmp_path: pathlib.Path) -> None:
    good = (CORPUS / "ort_adamw_with_optimizer.ckpt").read_bytes()
    cases = {
        "truncated.ckpt": good[: len(good) // 2],
        "random.ckpt": np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes(),
        "empty.ckpt": b"",
        "flipped.ckpt": good[:200] + bytes([good[200] ^ 0xFF]) + good[201:],
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
    _onnx_model(tmp_path / "model.onnx")
    cases["model.onnx"] = (tmp_path / "model.onnx").read_bytes()
    for name, data in cases.items():
        try:
            ortckpt.load_bytes(data)
            expected = None
        except ortckpt.CheckpointError as e:
            expected = str(e).removeprefix("<bytes>: ")
        state = drop(page, tmp_path / name)
        if expected is None:  # a flip the format does not notice loads in both
            assert state == "loaded", name
            continue
        assert state == "error", name
        assert error_text(page) == f"{name}: {expected}", name
        assert page.find_element(By.ID, "loaded").get_attribute("hidden") is not None
        # Still working: a good checkpoint loads right after.
        assert drop(page, CORPUS / "ort_sgd_with_optimizer.ckpt") == "loaded", name
        assert error_text(page) == ""
        check_tensor_table(page, ortckpt.load(CORPUS / "ort_sgd_with_optimizer.ckpt"))
    logs = [e for e in page.get_log("browser") if e["level"] == "SEVERE"]
    assert logs == []


def test_diff_of_two_rounds_written_by_ort(page: Any) -> None:
    """ORT's fresh training artifact against the same model after three AdamW steps: the trained
    parameters changed, the frozen one did not, and the optimizer state is new."""
    a, b = CORPUS / "ort_adamw_fresh_artifact.ckpt", CORPUS / "ort_adamw_with_optimizer.ckpt"
    assert drop(page, a, b) == "loaded", error_text(page)
    first, second = ortckpt.load(a), ortckpt.load(b)
    expected = {
        k: "same" if np.array_equal(p.data, second.parameters[k].data) else "changed"
        for k, p in first.parameters.items()
    }
    expected.update({k: "added" for k, (kind, _) in expected_tensors(second).items() if kind == "optimizer"})
    status = {r["data"]["key"]: r["data"]["status"] for r in table(page, "diff")}
    assert status == expected
    assert "changed" in status.values() and "same" in status.values()


def test_screenshots(page: Any, tmp_path: pathlib.Path) -> None:
    """The viewer renders (non-empty screenshots); ORTCKPT_WEB_SCREENSHOTS=1 writes them to
    docs/img/ for docs/viewer.md."""
    out = REPO / "docs" / "img" if os.environ.get("ORTCKPT_WEB_SCREENSHOTS") == "1" else tmp_path
    out.mkdir(parents=True, exist_ok=True)
    drop(page, CORPUS / "ort_adamw_with_optimizer.ckpt")
    page.find_element(By.CSS_SELECTOR, '#tensors tr[data-key="fc1.weight"]').click()
    page.execute_script("window.scrollTo(0, 0)")
    assert page.save_screenshot(str(out / "viewer.png"))
    drop(page, CORPUS / "ort_adamw_fresh_artifact.ckpt", CORPUS / "ort_adamw_with_optimizer.ckpt")
    page.execute_script("window.scrollTo(0, 0)")
    assert page.save_screenshot(str(out / "viewer-diff.png"))
    for name in ("viewer.png", "viewer-diff.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (out / name).stat().st_size > 10_000


# --- the JavaScript API, called from the page -------------------------------------------------------

_BUILD_IN_JS = """
const O = window.ortckpt;
const b = new O.CheckpointBuilder();
b.addParameter("fc.weight", "float32", [2, 3], new Float32Array([1, 2, 3, 4, 5, 6]), true);
b.addParameter("half", "float16", [2], new Uint16Array([0x3c00, 0xc000]), true);
b.addParameter("fc.bias", "float64", [3], new Float64Array([0.5, -1, 2]), false);
b.addParameter("ids", "int64", [2], new BigInt64Array([1n, -9007199254740993n]), false);
b.addParameter("words", "string", [2], ["héllo", ""], false);
b.addOptimizerGroup("group0", 7, 0.001);
b.addMomentum("group0", "fc.weight", "momentum0", "float32", [2, 3], new Float32Array(6).fill(0.25));
b.addIntProperty("epoch", 7);
b.addFloatProperty("loss", 0.5);
b.addStringProperty("note", "héllo ✓");
const bytes = b.toBytes();
const c = O.Checkpoint.open(bytes);
const shown = Object.fromEntries(c.tensors().map(t => {
  const v = c.values(t.index);
  return [t.key, [v.constructor.name, Array.from(v, x => String(x))]];
}));
return [Array.from(bytes), shown];
"""


def test_js_builder_writes_what_ortckpt_serialize_writes(page: Any) -> None:
    js_bytes, shown = page.execute_script(_BUILD_IN_JS)
    state = CheckpointState(
        {"fc.weight": np.arange(1, 7, dtype=np.float32).reshape(2, 3), "half": np.array([1, -2], np.float16)},
        frozen={
            "fc.bias": np.array([0.5, -1, 2]),
            "ids": np.array([1, -9007199254740993], np.int64),
            "words": np.array(["héllo", ""], dtype=object),
        },
        optimizer={
            "group0": OptimizerGroup(
                step=7,
                initial_learning_rate=0.001,
                states={"fc.weight": {"momentum0": np.full((2, 3), 0.25, np.float32)}},
            )
        },
        properties={"epoch": 7, "loss": 0.5, "note": "héllo ✓"},
    )
    assert bytes(js_bytes) == ortckpt.serialize(state)
    assert shown == {
        "fc.weight": ["Float32Array", ["1", "2", "3", "4", "5", "6"]],
        "half": ["Float32Array", ["1", "-2"]],  # float16 widened
        "fc.bias": ["Float64Array", ["0.5", "-1", "2"]],
        "ids": ["BigInt64Array", ["1", "-9007199254740993"]],
        "words": ["Array", ["héllo", ""]],
        "group0/fc.weight/momentum0": ["Float32Array", ["0.25"] * 6],
    }


def test_js_errors_carry_the_core_message(page: Any) -> None:
    data = (CORPUS / "ort_nominal.ckpt").read_bytes()[:100]
    name, kind, message = page.execute_script(
        """try { window.ortckpt.Checkpoint.open(new Uint8Array(arguments[0])); return null; }
           catch (e) { return [e.name, e.kind, e.message]; }""",
        list(data),
    )
    with pytest.raises(ortckpt.InvalidCheckpointError) as raised:
        ortckpt.load_bytes(data)
    assert (name, kind) == ("CheckpointError", "InvalidCheckpoint")
    assert message == str(raised.value).removeprefix("<bytes>: ")
    name, message = page.execute_script(
        """const b = new window.ortckpt.CheckpointBuilder();
           b.addParameter("w", "float32", [3], new Float32Array(2), true);
           try { b.toBytes(); return null; } catch (e) { return [e.name, e.message]; }"""
    )
    assert name == "CheckpointError" and '"w"' in message and "needs 12 bytes" in message


def test_mutated_checkpoints_only_ever_throw_checkpoint_errors(page: Any) -> None:
    """Truncations and byte flips of an ORT checkpoint, each opened and read in full through the JS
    API: every failure is a CheckpointError (a Rust panic would be a RuntimeError), and the module
    still reads the intact file afterwards."""
    data = list((CORPUS / "ort_adamw_with_optimizer.ckpt").read_bytes())
    outcome = page.execute_script(
        """
        const O = window.ortckpt, good = new Uint8Array(arguments[0]);
        let seed = 12345;
        const rand = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
        const seen = {};
        for (let i = 0; i < 3000; i++) {
          let bytes = good.slice(0, i < 300 ? rand(good.length) : good.length);
          for (let k = 0, n = 1 + rand(4); k < n && i >= 300; k++) bytes[rand(bytes.length)] = rand(256);
          let result = "opened";
          try {
            const c = O.Checkpoint.open(bytes);
            for (const t of c.tensors()) { c.values(t.index); c.stats(t.index, 10); }
            c.properties(); c.optimizerGroups(); c.free();
          } catch (e) { result = e.name; }
          seen[result] = (seen[result] || 0) + 1;
        }
        const ok = O.Checkpoint.open(good).tensors().length;
        return [seen, ok];
        """,
        data,
    )
    seen, tensors_after = outcome
    assert set(seen) <= {"opened", "CheckpointError"}, seen
    assert seen.get("CheckpointError", 0) > 100 and tensors_after == 10
