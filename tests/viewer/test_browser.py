"""The viewer in a real browser: headless Chromium driven by Selenium walks runs -> filter by
reward -> a trajectory -> its token view -> its group, asserting on what the page shows.

One browser serves the session (``conftest.browser``); it is stopped whatever happens, and no
process of its is left behind.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from trajforge.schema.synthetic import synthetic_trajectory
from trajforge.serve.server import serving_app
from trajforge.store import TrajectoryStore
from trajforge.viewer.app import create_app
from trajforge.viewer.service import ViewerData

from .chromium import WAIT_S
from .layout import RUN, SAMPLES

MIN_REWARD = 0.5


def _wait_for(driver: WebDriver, css: str) -> None:
    WebDriverWait(driver, WAIT_S).until(ec.presence_of_element_located((By.CSS_SELECTOR, css)))


def test_walk_runs_filter_trajectory_tokens_group(data: ViewerData, browser: WebDriver) -> None:
    with serving_app(create_app(data)) as base:
        # Runs: the RL run is listed with its episodes; open it.
        browser.get(base + "/")
        run_row = browser.find_element(By.CSS_SELECTOR, f'tr.run-row[data-run="{RUN}"]')
        run_row.find_element(By.TAG_NAME, "a").click()
        _wait_for(browser, "#run-id")
        assert browser.find_element(By.ID, "run-id").text == RUN
        everything = int(browser.find_element(By.ID, "total").text)

        # Filter by reward: only rows at or above the bound remain, and fewer of them.
        box = browser.find_element(By.NAME, "min_reward")
        box.clear()
        box.send_keys(str(MIN_REWARD))
        browser.find_element(By.ID, "apply-filters").click()
        WebDriverWait(browser, WAIT_S).until(lambda d: "min_reward=" in d.current_url)
        rows = browser.find_elements(By.CSS_SELECTOR, "tr.traj-row")
        rewards = [float(r.get_attribute("data-reward") or "nan") for r in rows]
        assert rows and all(x >= MIN_REWARD for x in rewards)
        assert int(browser.find_element(By.ID, "total").text) == len(rows) < everything
        assert browser.find_element(By.ID, "live-state").text in {"connecting", "connected"}

        # A trajectory: its id and reward as the table showed them; the conversation first.
        chosen = rows[0].get_attribute("data-id")
        rows[0].find_element(By.CSS_SELECTOR, "a.traj-link").click()
        _wait_for(browser, "#traj-id")
        assert browser.find_element(By.ID, "traj-id").text == chosen
        assert float(browser.find_element(By.ID, "reward").text) == pytest.approx(rewards[0], 1e-3)
        assert browser.find_element(By.ID, "conversation").is_displayed()
        assert not browser.find_element(By.ID, "tokens").is_displayed()

        # Token view: a tab switch in the page; sampled tokens are in the loss and coloured.
        browser.find_element(By.ID, "tab-tokens").click()
        assert browser.find_element(By.ID, "tokens").is_displayed()
        assert not browser.find_element(By.ID, "conversation").is_displayed()
        masked = browser.find_elements(By.CSS_SELECTOR, "#tokens .tok-line .tok.mask")
        context = browser.find_elements(By.CSS_SELECTOR, "#tokens .tok-line .tok:not(.mask)")
        assert masked and context
        assert all("logprob" in (t.get_attribute("title") or "") for t in masked[:20])
        assert "hsl(" not in (context[0].get_attribute("style") or "")
        assert masked[0].value_of_css_property("background-color") not in {
            context[0].value_of_css_property("background-color"),
            "rgba(0, 0, 0, 0)",
        }
        browser.find_element(By.ID, "show-ids").click()
        assert "ids" in (masked[0].find_element(By.XPATH, "..").get_attribute("class") or "")
        shot = browser.get_screenshot_as_png()

        # Its group: every sample side by side, this one among them, each with an advantage.
        browser.find_element(By.ID, "group-link").click()
        _wait_for(browser, "#group-table")
        members = browser.find_elements(By.CSS_SELECTOR, "#group-table tr.member")
        assert len(members) == SAMPLES
        assert chosen in {m.get_attribute("data-id") for m in members}
        advantages = [float(m.find_element(By.CSS_SELECTOR, ".advantage").text) for m in members]
        assert abs(sum(advantages)) < 1e-2 and max(advantages) > 0
        assert len(browser.find_elements(By.CSS_SELECTOR, ".side-by-side .column")) == SAMPLES

    with Image.open(io.BytesIO(shot)) as image:
        grey = image.convert("L")
        dark = sum(grey.histogram()[:200])
        assert grey.size[0] >= 1000
    assert dark > 20_000, "the screenshot of the token view is (nearly) blank"


def test_a_run_page_shows_trajectories_stored_while_it_is_open(
    tmp_path: Path, browser: WebDriver
) -> None:
    path = tmp_path / "live.db"
    with TrajectoryStore(path) as st:
        st.add_many(synthetic_trajectory(i, run_id="live") for i in range(3))
    data = ViewerData(path)
    try:
        with serving_app(create_app(data)) as base:
            browser.get(f"{base}/runs/live")
            WebDriverWait(browser, WAIT_S).until(
                lambda d: d.find_element(By.ID, "live-state").text == "connected"
            )
            with TrajectoryStore(path) as st:  # another writer, as a running collect is
                st.add_many(synthetic_trajectory(i, run_id="live") for i in range(3, 5))
            WebDriverWait(browser, WAIT_S).until(
                lambda d: d.find_element(By.ID, "live-count").text == "2"
            )
            fresh = browser.find_elements(By.CSS_SELECTOR, "tr.traj-row.fresh")
            assert [r.get_attribute("data-id") for r in fresh] == ["live-0000004", "live-0000003"]
            assert browser.find_element(By.ID, "total").text == "5"
            assert len(browser.find_elements(By.CSS_SELECTOR, "tr.traj-row")) == 5
            browser.get("about:blank")  # the page closes its stream as it is left
    finally:
        data.close()
