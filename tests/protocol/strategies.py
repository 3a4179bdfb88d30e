"""Hypothesis strategies for the nine message models (shared by the property tests)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from envelopay.protocol import (
    Accept,
    Fulfill,
    Give,
    Invoice,
    Methods,
    Offer,
    Oops,
    OopsError,
    Order,
    Pay,
    RailMethod,
    Want,
    Which,
)

text = st.text(max_size=40)
ident = st.text(min_size=1, max_size=24)
opt_text = st.none() | text
opt_ident = st.none() | ident
amount = st.integers(min_value=0, max_value=2**256 - 1)
version01 = st.sampled_from(["0.1.0", "0.1", "0.1.7", "0.2.0"])
json_scalar = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text
)
json_value = st.recursive(
    json_scalar, lambda c: st.lists(c, max_size=4) | st.dictionaries(text, c, max_size=4), max_leaves=12
)
json_object: st.SearchStrategy[dict[str, Any]] = st.dictionaries(text, json_value, max_size=5)
task = json_object | text

rail = st.builds(RailMethod, chain=ident, token=ident, wallet=ident, price=amount)
give = st.builds(Give, amount=amount, token=ident, chain=ident, to=ident, proof=json_object)
want = st.builds(Want, amount=amount, token=ident, chain=ident)
oops_error = st.builds(
    lambda code, extra: OopsError(code=code, **extra),
    st.text(min_size=1, max_size=20),
    st.dictionaries(st.text(max_size=10).filter(lambda k: k != "code"), json_value, max_size=3),
)

which = st.builds(Which, v=version01, id=opt_ident, note=opt_text, task=st.none() | task)
methods = st.builds(
    Methods, v=version01, rails=st.lists(rail, min_size=1, max_size=3), id=opt_ident, which_ref=opt_ident,
    note=opt_text, fallback=opt_text,
)  # fmt: skip
pay = st.builds(
    Pay, v=version01, id=ident, amount=amount, token=ident, chain=ident, proof=json_object,
    invoice_ref=opt_ident, note=opt_text,
)  # fmt: skip
order = st.builds(Order, v=version01, id=ident, task=task, note=opt_text) | st.builds(
    Order, v=st.just("0.2.0"), id=ident, task=task, note=opt_text, amount=amount, token=ident, chain=ident,
    proof=json_object,
)  # fmt: skip
fulfill = st.builds(Fulfill, v=version01, id=ident, order_ref=ident, result=json_value, note=opt_text)
invoice = st.builds(
    Invoice, v=version01, id=ident, amount=amount, token=ident, chain=ident, wallet=ident, due=opt_text,
    order_ref=opt_ident, note=opt_text,
)  # fmt: skip
offer = st.builds(Offer, v=version01, id=ident, give=give, want=want, wallet=ident, note=opt_text)
accept = st.builds(
    Accept, v=version01, id=ident, offer_ref=ident, amount=amount, token=ident, chain=ident,
    proof=json_object, note=opt_text,
)  # fmt: skip
oops = st.builds(Oops, v=version01, note=text, id=opt_ident, error=st.none() | oops_error, ref=opt_ident)

BY_TYPE = {
    "which": which, "methods": methods, "pay": pay, "order": order, "fulfill": fulfill,
    "invoice": invoice, "offer": offer, "accept": accept, "oops": oops,
}  # fmt: skip
any_message = st.one_of(*BY_TYPE.values())
