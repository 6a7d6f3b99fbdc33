"""``python -m lerobotstream.integrations.lerobot`` = ``lerobotstream-train``."""

from lerobotstream.integrations.lerobot.train import main

main()
