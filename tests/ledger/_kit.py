"""Moved: the rails mock kit is envelopay.testing.mock_rail (DictRail, Tx, the message
builders) and envelopay.testing.mock_worker (WorkerApp). This name stays only until the
last test importing `_kit` imports those instead."""

from envelopay.testing.mock_rail import *  # noqa: F403
from envelopay.testing.mock_worker import WorkerApp as WorkerApp
