"""The MLflow UI as a researcher meets it, in a real browser: headless Chromium driven by Selenium against
`bayesx ui` on a store holding the issue's sweep (`bayesx run -m method=nuts,vi,pathfinder model=logreg
data=digits`). The experiment's run table lists the sweep's runs under their parent, a run page shows
`ess_bulk_min` and the description, and the parent's comparison plot loads as an image.

Skipped, with the reason, where Selenium or Debian's chromium and chromium-driver are missing (.ci/run installs
them). With ``BAYESX_UI_SCREENSHOTS=<folder>`` (``make ui-screenshots``) it also saves the README's screenshots
there: run_table.png and sweep_comparison.png.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from bayesx.server import free_port

pytestmark = pytest.mark.slow

SWEEP = ["-m", "method=nuts,vi,pathfinder", "model=logreg", "data=digits"]  # the sweep, as typed
SHOWN_METRICS = ("posterior_mean_err", "psis_khat", "ess_bulk_min", "n_grad_evals", "wall_time_s")  # for the README
NOTE_TAG = "mlflow.note.content"
MODEL_TRAINING = "workflowType=machine_learning"  # MLflow 3's model-training view, not its GenAI one
SCREENSHOTS = os.environ.get("BAYESX_UI_SCREENSHOTS")
PAGE_WAIT_S = 120  # the UI's first page load on a busy 2-core machine


def why_no_browser() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "Selenium is not installed (pip install -e '.[dev]')"
    if not any(shutil.which(name) for name in ("chromium", "chromium-browser")):
        return "no Chromium browser (apt-get install chromium chromium-driver)"
    if not shutil.which("chromedriver"):
        return "no chromedriver (apt-get install chromium-driver)"
    return None


if why_no_browser() is not None:
    pytest.skip(why_no_browser(), allow_module_level=True)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A store with the sweep (subprocess, as a user runs it); returns (uri, experiment id, runs by method, parent)."""
    from mlflow.tracking import MlflowClient

    root = tmp_path_factory.mktemp("browser-ui")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    env = {k: v for k, v in os.environ.items() if k != "BAYESX_PARENT_RUN_ID"}
    env["MLFLOW_TRACKING_URI"] = uri  # not an override, which would be in the sweep's name
    done = subprocess.run([sys.executable, "-m", "bayesx", "run", *SWEEP], cwd=root, env=env,
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    (parent,) = [r for r in runs if r.data.tags.get("sweep") == "parent"]
    children = {r.data.tags["method"]: r for r in runs if r.data.tags.get("role") != "reference" and r is not parent}
    assert sorted(children) == ["nuts", "pathfinder", "vi"]
    return uri, parent.info.experiment_id, children, parent


@pytest.fixture(scope="module")
def ui(sweep, tmp_path_factory):
    """`bayesx ui` on the sweep's store; its base URL once it answers."""
    port = free_port()
    log = open(tmp_path_factory.mktemp("ui") / "ui.out", "w+")
    server = subprocess.Popen([sys.executable, "-m", "bayesx", "ui", "--uri", sweep[0], "--port", str(port)],
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None, Path(log.name).read_text()[-3000:]
            assert time.monotonic() < deadline, "bayesx ui did not answer within 180 s"
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        yield base
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
        log.close()


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=2000,1100"):
        options.add_argument(argument)
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def page_text(driver) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.TAG_NAME, "body").text


def wait_for(driver, *texts: str) -> str:
    """The page's text once it shows every one of ``texts``."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, PAGE_WAIT_S).until(lambda d: all(t in page_text(d) for t in texts),
                                             f"the page never showed {texts}")
    return page_text(driver)


def screenshot(driver, name: str, right: float, bottom: float) -> None:
    """Save the page's top left corner, up to the CSS pixels (right, bottom), as ``name`` in $BAYESX_UI_SCREENSHOTS."""
    if not SCREENSHOTS:
        return
    import io

    import matplotlib.image

    Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
    image = matplotlib.image.imread(io.BytesIO(driver.get_screenshot_as_png()), format="png")
    scale = image.shape[1] / driver.execute_script("return window.innerWidth")
    matplotlib.image.imsave(Path(SCREENSHOTS) / name, image[:int(bottom * scale), :int(right * scale)])


def show_columns(driver, metrics: tuple[str, ...]) -> None:
    """Tick ``metrics`` in the run table's Columns menu (those not shown yet), then close the menu."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.find_element(By.XPATH, "//button[contains(., 'Columns')]").click()
    for metric in metrics:
        for node in driver.find_elements(By.XPATH, f"//span[@title='{metric}']/ancestor::div[contains(@class, "
                                                   "'tree-treenode')][1]"):
            if "checkbox-checked" not in node.get_attribute("class"):
                node.find_element(By.XPATH, f".//span[@title='{metric}']").click()
            break
    driver.find_element(By.TAG_NAME, "body").send_keys(Keys.ESCAPE)


def show_more(driver) -> None:
    """Unfold a long description (MLflow shows its first lines and a "Show more" button)."""
    from selenium.webdriver.common.by import By

    for button in driver.find_elements(By.XPATH, "//button[contains(., 'Show more')]"):
        if button.is_displayed():
            button.click()


def close_assistant(driver) -> None:
    """MLflow 3's assistant panel, open on a first visit, hides half the table."""
    from selenium.webdriver.common.by import By

    for button in driver.find_elements(By.CSS_SELECTOR, 'button[aria-label="Close"]'):
        if button.is_displayed():
            button.click()


def test_the_run_table_lists_the_sweeps_runs_under_their_parent(sweep, ui, browser):
    from selenium.webdriver.common.by import By

    _, experiment_id, children, parent = sweep
    browser.get(f"{ui}/#/experiments/{experiment_id}?{MODEL_TRAINING}")
    text = wait_for(browser, parent.info.run_name[:20])
    assert not any(run.info.run_name[:12] in text for run in children.values())  # folded under the parent
    browser.find_element(By.CSS_SELECTOR, 'button[data-component-id*="runnamecellrenderer"]').click()  # unfold
    wait_for(browser, *(run.info.run_name[:12] for run in children.values()))
    close_assistant(browser)
    if SCREENSHOTS:
        show_columns(browser, SHOWN_METRICS)
        time.sleep(2)
        rows = browser.find_elements(By.CSS_SELECTOR, "div.ag-row")
        bottom = max(row.rect["y"] + row.rect["height"] for row in rows) + 40
        right = max(cell.rect["x"] + cell.rect["width"] for cell in browser.find_elements(By.CSS_SELECTOR,
                                                                                          "div.ag-header-cell")) + 30
        screenshot(browser, "run_table.png", right, bottom)


def test_a_run_page_shows_its_ess_and_description(sweep, ui, browser):
    _, experiment_id, children, parent = sweep
    nuts = children["nuts"]
    browser.get(f"{ui}/#/experiments/{experiment_id}/runs/{nuts.info.run_id}?{MODEL_TRAINING}")
    text = wait_for(browser, "ess_bulk_min", nuts.info.run_name)
    note = nuts.data.tags.get(NOTE_TAG)
    if note:  # the run's own description (its summary), where the run wrote one: its first words, rendered
        first_words = " ".join(re.sub(r"[*_`#>\[\]]", "", note.strip().splitlines()[0]).split()[:4])
        assert first_words in text, (first_words, text[:2000])
    browser.get(f"{ui}/#/experiments/{experiment_id}/runs/{parent.info.run_id}?{MODEL_TRAINING}")
    wait_for(browser, "The winner on each criterion")  # the sweep's description: who won on which criterion
    show_more(browser)
    text = page_text(browser)
    assert "lowest posterior_mean_err" in text and "lowest wall_time_s" in text, text[:3000]


def test_the_parent_runs_comparison_plot_loads(sweep, ui, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _, experiment_id, _, parent = sweep
    run_page = f"{ui}/#/experiments/{experiment_id}/runs/{parent.info.run_id}"
    browser.get(f"{run_page}/artifacts/comparison/error_vs_cost.png?{MODEL_TRAINING}")
    wait_for(browser, "error_vs_cost.png", "report.md", "table.csv")

    def loaded(driver) -> bool:
        return any(driver.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img) > 300
                   for img in driver.find_elements(By.TAG_NAME, "img"))

    WebDriverWait(browser, PAGE_WAIT_S).until(loaded, "the comparison plot never loaded as an image")
    close_assistant(browser)
    plot = next(img for img in browser.find_elements(By.TAG_NAME, "img") if img.rect["width"] > 300)
    screenshot(browser, "sweep_comparison.png", plot.rect["x"] + plot.rect["width"] + 30,
               plot.rect["y"] + plot.rect["height"] + 20)
