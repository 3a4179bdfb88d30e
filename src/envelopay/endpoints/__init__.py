"""Email as a tool: addresses that are tools, and the calls that use them.

    toolmail.py    the format: a typed application/json part, threading, the call id
    responders.py  the tool side: an address, a schema and a handler; structured errors
    reference.py   the reference responder kv@ (a fixed key-value table)
    calls.py       the caller side: send a call, correlate its reply, keep the record

Nothing here speaks the payment protocol; the endpoints sit beside the worker and
below the node that serves them.
"""
