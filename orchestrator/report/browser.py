"""How report checks launch the system Chromium headless (tests and the large-run bench).

The flags keep Chromium from reaching out to the network at start, which a closed machine
refuses; Playwright drives this binary and never downloads a browser of its own.
"""

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
