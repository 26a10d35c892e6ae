"""A headless chromium for the dashboard tests (Debian's chromium driven through
chromium-driver by selenium), shared by tests/http and tests/jobd: start it, wait for the
page, save screenshots under tests/screenshots/ (ignored by git) for a person to look at."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

SCREENSHOTS = Path(__file__).resolve().parent / "screenshots"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
# Bounds how long a broken page can hold a test; a working one answers in well under a second
# (the live views refresh themselves every 2 s).
WAIT_S = 15


def start_browser():
    """A headless chromium (the caller quits it)."""
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.fail("chromium and chromium-driver are missing: run scripts/setup.sh",
                    pytrace=False)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,860", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(WAIT_S)
    SCREENSHOTS.mkdir(exist_ok=True)
    return driver


def wait_until(driver, condition, what: str):
    from selenium.common.exceptions import (NoSuchElementException,
                                            StaleElementReferenceException)
    from selenium.webdriver.support.ui import WebDriverWait

    # The page redraws itself (live counts): an element found a moment ago may be gone.
    redrawn = (NoSuchElementException, StaleElementReferenceException)
    try:
        return WebDriverWait(driver, WAIT_S, poll_frequency=0.05,
                             ignored_exceptions=redrawn).until(lambda d: condition(d))
    except Exception as e:  # a timeout: say what was awaited, and show the page
        raise AssertionError(f"{what}; the page shows:\n{driver.find_element('tag name', 'main').text}") from e


def shot(driver, name: str) -> None:
    driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))


def cell_text(driver, selector: str) -> str:
    """The text of the element `selector` picks, read in one step ('' while not shown)."""
    return driver.execute_script(
        "const c = document.querySelector(arguments[0]); return c ? c.textContent : '';",
        selector)
