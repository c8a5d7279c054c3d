"""``manage.py simulate TRACE.json [--policy wrr|fifo|proportional] [--summary]``
(docs/scheduling.md; the trace's ``eta_model`` picks the ETA model).
Bad input: exit status 2, one line on stderr."""
from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from fairsched.management.commands.plan import read_json
from scheduling.contract.fields import ScenarioError
from scheduling.contract.scenario import simulate
from scheduling.modes import Dispatch, Policy, Share
from scheduling.contract.simulator import POLICIES


def _s(v, fmt="{:.0f}") -> str:
    return "-" if v is None else fmt.format(v)


def render_summary(result: dict) -> str:
    """Per org: charts, mean and max wait, first start, share of starts (vs weight)."""
    summ = result["summary"]
    lines = [f"policy {result['policy']}  charts {len(result['charts'])}  "
             f"contended starts {summ['contended_starts']}  Jain {_s(summ['jain'], '{:.3f}')}",
             f"{'org':<12} {'charts':>6} {'started':>7} {'first start s':>13} {'mean wait s':>11} "
             f"{'p95 wait s':>10} {'max wait s':>10} {'share starts':>12} {'share weight':>12}"]
    for org, o in summ["orgs"].items():
        lines.append(f"{org:<12} {o['charts']:>6} {o['started']:>7} {_s(o['first_start_s']):>13} "
                     f"{_s(o['mean_wait_s']):>11} {_s(o['p95_wait_s']):>10} "
                     f"{_s(o['max_wait_s']):>10} {_s(o['share_of_starts'], '{:.1%}'):>12} "
                     f"{_s(o['share_of_weight'], '{:.1%}'):>12}")
    errs = [c["eta_at_arrival_s"] - c["finish_s"] for c in result["charts"]
            if c["eta_at_arrival_s"] is not None and c["finish_s"] is not None]
    if errs:
        lines.append(f"ETA at arrival ({result.get('eta_model', 'lanes')}): mean absolute error "
                     f"{sum(map(abs, errs)) / len(errs):.0f} s, bias {sum(errs) / len(errs):+.0f} s "
                     f"over {len(errs)} charts")
    lines += _policy_lines(result)
    return "\n".join(lines)


def _policy_lines(result: dict) -> list[str]:
    """The policy figures (docs/scheduling.md, "Comparing the policies")."""
    summ = result["summary"]
    if "budget_use_while_waiting" not in summ:
        return []
    share = result.get("share", Share.CHARTS)
    q = f" (quantum {result['quantum_s']:.0f} s)" if share == Share.WORK else ""
    lines = [f"share {share}{q}, dispatch {result.get('dispatch', Dispatch.STRICT)}: budget use while charts wait "
             f"{_s(summ['budget_use_while_waiting'], '{:.1%}')}; Jain of budget share / weight share "
             f"{_s(summ['budget_jain'], '{:.3f}')} over {_s(summ['budget_window_s'])} s until the first org drained",
             f"{'org':<12} {'wait p50 s':>10} {'wait p95 s':>10} {'budget share':>12} {'weight share':>12}"]
    for org, o in summ["policy_orgs"].items():
        lines.append(f"{org:<12} {_s(o.get('wait_p50_s')):>10} {_s(o.get('wait_p95_s')):>10} "
                     f"{_s(o.get('budget_share'), '{:.1%}'):>12} {_s(o.get('weight_share'), '{:.1%}'):>12}")
    return lines


class Command(BaseCommand):
    help = "Replay a trace of arrivals through the scheduling core on a simulated clock."

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", nargs="?", help="trace JSON file, or - for stdin")
        # validated in handle(), so a bad value is one line and exit status 2
        parser.add_argument("--policy", default=Policy.WRR.value, help="wrr (default), fifo or proportional")
        parser.add_argument("--summary", action="store_true", help="a table per org instead of JSON")

    def handle(self, *args, **opts) -> None:
        try:
            if opts["policy"] not in POLICIES:
                simulate({}, opts["policy"])  # raises the one-line ScenarioError
            trace = read_json(opts["file"], self.stdin if hasattr(self, "stdin") else None)
            result = simulate(trace, opts["policy"])
        except ScenarioError as e:
            raise CommandError(str(e), returncode=2) from None
        if opts["summary"]:
            self.stdout.write(render_summary(result))
        else:
            self.stdout.write(json.dumps(result, indent=2))
