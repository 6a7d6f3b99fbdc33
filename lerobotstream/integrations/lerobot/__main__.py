"""``python -m lerobotstream.integrations.lerobot`` = ``lerobotstream-train``."""

from lerobotstream.integrations.lerobot.cli import main

main()
