"""The paid worker: what an address that sells work decides, one step at a time.

    app.py         WorkerApp / WorkerApplication: METHODS, INVOICE or FULFILL, ACCEPT
    tasks.py       the declared tasks: the TaskBook, request validation, running a handler
    operations.py  reference operations a config can declare (word_count, digest)
    counterpay.py  the OFFER counter-payments already made (paid once, across restarts)

The worker is an `envelopay.engine.Application`: it answers with values and never
touches mail, the ledger or the wiring of a node.
"""
