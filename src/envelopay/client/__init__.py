"""The buyer side the CLI drives, and the front-end helpers built on a node.

    buyer.py             ClientApp and what the buyer commands need (build, pay_first, follow)
    demo.py              run_demo: a worker and a buyer trading in one process
    live_conformance.py  run_live: the conformance vectors sent to a live address

Each of these drives an `envelopay.node` from the outside, as a front end does; none
of them is imported by anything below the CLI.
"""
