"""Headless Debian Chromium driven by chromedriver, launched as ARCHITECTURE.md says: for the
browser tests (tests/pages/conftest.py) and the docs' screenshots (bench/screenshots.py)."""

from __future__ import annotations

import os
import shutil

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def installed() -> bool:
    """Whether Debian's chromium and chromium-driver are on this machine."""
    return bool(shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER))


def driver(width: int = 1400, height: int = 1000, *, flags: tuple[str, ...] = (), log=False):
    """A headless Chromium of that window size, with `flags` besides; `log`: its console
    readable (`driver.get_log("browser")`)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, *flags, f"--window-size={width},{height}"):
        options.add_argument(flag)
    if log:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
