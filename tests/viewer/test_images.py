"""Message images in the viewer: served by content hash from the store's image table and shown
as ``<img>`` in the conversation, checked through the test client and in a real browser."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from image_samples import image_trajectory, png_bytes
from trajforge.serve.server import serving_app
from trajforge.store import TrajectoryStore
from trajforge.viewer.app import create_app
from trajforge.viewer.service import ViewerData

from .chromium import WAIT_S

PICTURE = png_bytes(7)


@pytest.fixture
def seen(tmp_path: Path) -> Iterator[tuple[ViewerData, str, str]]:
    """A store holding one trajectory with a PNG: its viewer data, the trajectory's id and
    the image's hash."""
    traj = image_trajectory(PICTURE)
    with TrajectoryStore(tmp_path / "s.db") as store:
        store.add(traj)
    data = ViewerData(tmp_path / "s.db")
    try:
        yield data, traj.id, traj.messages[0].images[0].sha256
    finally:
        data.close()


def test_images_are_served_by_hash_and_named_in_the_page(
    seen: tuple[ViewerData, str, str],
) -> None:
    data, traj_id, sha = seen
    with TestClient(create_app(data)) as client:
        image = client.get(f"/images/{sha}")
        assert image.status_code == 200 and image.content == PICTURE
        assert image.headers["content-type"] == "image/png"
        assert "immutable" in image.headers["cache-control"]
        assert client.get(f"/images/{'0' * 64}").status_code == 404
        assert client.get("/images/not-a-hash").status_code == 404
        (message, _) = client.get(f"/api/trajectories/{traj_id}").json()["messages"]
        assert message["content"] == "What is shown?"
        assert [(i["sha256"], i["size"]) for i in message["images"]] == [(sha, len(PICTURE))]
        page = client.get(f"/trajectories/{traj_id}").text
        assert f'<img class="msg-image" src="/images/{sha}"' in page


def test_a_png_in_a_message_shows_in_the_browser(
    seen: tuple[ViewerData, str, str], browser: WebDriver
) -> None:
    data, traj_id, sha = seen
    with serving_app(create_app(data)) as base:
        browser.get(f"{base}/trajectories/{traj_id}")
        shown = WebDriverWait(browser, WAIT_S).until(
            lambda d: d.find_element(By.CSS_SELECTOR, f'img.msg-image[src="/images/{sha}"]')
        )
        WebDriverWait(browser, WAIT_S).until(
            lambda d: d.execute_script("return arguments[0].complete", shown)
        )
        assert browser.execute_script("return arguments[0].naturalWidth", shown) > 0
        assert shown.value_of_css_property("max-height") == "480px"
        assert shown.is_displayed()
