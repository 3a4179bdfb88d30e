from envelopay.mail.mailbox.actions import *  # noqa: F403
from envelopay.mail.mailbox.actions import __all__ as __all__
