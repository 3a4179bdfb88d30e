"""Money back through real processes (issue 31): a devnet, `envelopay worker serve` for a
seller whose paid task fails, and a buyer's `envelopay order --pay --wait`, each its own
process. With the policy `refund` the buyer is paid back on the chain and its flow shows
`refunded`, the refund checked on its rail; with `hold` the job waits until the operator's
`envelopay jobs refund JOB`, which pays it back once (a second is refused, exit 2), and the
buyer's served mailbox takes the OOPS in and shows that flow `refunded` too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests import readme_run as rr

from envelopay.config import load_config
from envelopay.ledger.sqlite import SqliteStore

TASKS = """
[[tasks]]
name = "broken"
command = ["python3", "-c", "import sys; sys.exit(3)"]
schema = "envelopay.worker.operations:WordCount"
price = "250000"
time_limit = 30

[[tasks]]
name = "broken_hold"
command = ["python3", "-c", "import sys; sys.exit(3)"]
schema = "envelopay.worker.operations:WordCount"
price = "250000"
time_limit = 30
on_failure = "hold"
"""

SCRIPT = """
set -x
B="-c buyer/envelopay.toml"; S="-c seller/envelopay.toml"
envelopay devnet up --detach
envelopay init --devnet --address seller@garden.local --dir seller
envelopay init --devnet --address buyer@garden.local --dir buyer
cat tasks.toml >> seller/envelopay.toml
envelopay worker serve $S > serve.log 2>&1 &
T1='{"name":"broken","text":"a b c"}'; T2='{"name":"broken_hold","text":"a b c"}'
envelopay order seller@garden.local --task "$T1" --pay --wait --json $B > refunded.json
echo "exit=$?" >> refunded.json
# no answer comes for a held job: the order ends at the worker's WAIT `held`
envelopay order seller@garden.local --task "$T2" --pay --wait --json $B > held.json
echo "exit=$?" >> held.json
for i in $(seq 1 40); do
  envelopay jobs list --state held --json $S > jobs.json && grep -q '"job"' jobs.json && break; sleep 0.5
done
JOB=$(python -c 'import json; print(json.load(open("jobs.json"))["jobs"][0]["job"])')
envelopay worker serve $B > buyer.log 2>&1 &                           # the buyer takes its mail in
envelopay jobs refund "$JOB" --json $S > refund1.json; echo "exit=$?" >> refund1.json
envelopay jobs refund "$JOB" --json $S > refund2.json; echo "exit=$?" >> refund2.json
for i in $(seq 1 40); do
  envelopay flows --json $B > flows.json; [ "$(grep -o '"refunded"' flows.json | wc -l)" -ge 2 ] && break
  sleep 0.5
done
echo done-all
"""


def _tail(path: Path) -> str:
    return path.read_text()[-3000:] if path.exists() else "(none)"


def test_failed_paid_work_served_in_real_processes_is_refunded_and_a_held_job_by_the_operator(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "tasks.toml").write_text(TASKS)
    env = rr.shell_env(tmp_path)
    try:
        ran = rr.run_session(SCRIPT, work, env, timeout=300)
    finally:
        rr.devnet_down(work, env)
    if ran.timed_out:
        pytest.fail(f"the session did not end in 300 s:\n{ran.out[-6000:]}\n{_tail(work / 'serve.log')}")
    assert "done-all" in ran.out, ran.out[-6000:] + _tail(work / "serve.log")

    seller = load_config(work / "seller" / "envelopay.toml")
    store = SqliteStore(seller.path(seller.agent.ledger))
    try:
        jobs = {j.task: j for j in store.job_list(seller.agent.address)}
        assert jobs["broken"].state == "refunded", _tail(work / "serve.log")
        assert jobs["broken_hold"].state == "refunded"
        for job in jobs.values():
            answers = [e for e in store.flow_log(job.flow_id) if e.direction == "out" and e.type == "oops"]
            assert len(answers) == 1 and answers[0].body is not None  # one OOPS each, with its refund
            refund = answers[0].body["error"]["refund"]
            assert refund["amount"] == "250000" and refund["chain"] == "solana-local" and refund["proof"]
    finally:
        store.close()
    held = (work / "held.json").read_text()
    doc = json.loads(held.splitlines()[0])
    assert doc["held"] is True and doc["timed_out"] is False and "exit=1" in held, held
    assert [s["state"] for s in doc["states"]][-1] == "held" and doc["paid"] is not None, held
    first = (work / "refund1.json").read_text()
    assert json.loads(first.splitlines()[0])["state"] == "refunded" and "exit=0" in first
    second = (work / "refund2.json").read_text()
    assert "exit=2" in second and "only a held job" in second  # nothing paid twice
    flows = json.loads((work / "flows.json").read_text())
    states = [f["state"] for f in flows["flows"]]
    assert states.count("refunded") == 2, flows
