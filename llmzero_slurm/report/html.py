"""The report page: one static HTML file from templates/report/index.html.j2, linking the PNGs
beside it by relative name, with no external assets (it opens from a copied folder)."""
from __future__ import annotations

import math
import time

import jinja2

from .. import __version__
from ..metrics import score_names
from ..paths import TEMPLATE_TEXTS
from ..store.schema import creator
from .collect import RunView
from .costs import TOKEN_FIELDS, AgentCost
from .figures import Drawn
from .tree_figure import TREE

TEMPLATE = "report/index.html.j2"
LOADER = jinja2.DictLoader(TEMPLATE_TEXTS)    # read with the code (see paths.TEMPLATE_TEXTS)


def fmt(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.4g}"


def render_html(view: RunView, drawn: Drawn, strategy_file: str | None,
                elsewhere: bool = False) -> str:
    """`elsewhere`: the page is not in <run>/report (--output), so the paths it gives relative
    to the run name the run, which the page would otherwise name nowhere."""
    env = jinja2.Environment(loader=LOADER,
                             autoescape=True, undefined=jinja2.StrictUndefined)
    totals = AgentCost.total(view.agent_costs.values())
    # Two runs of one experiment (seeds, methods) are told apart by their folders' names.
    folder = view.root.absolute().name
    title = view.config.name + (f" ({folder})" if folder != view.config.name else "")
    return env.get_template(TEMPLATE).render(
        title=title, config=view.config, tree_size=len(view.tree), phases=view.phases, best=view.best,
        best_adapter=view.best_adapter, run_dir=str(view.root.absolute()) if elsewhere else None,
        unreadable=view.unreadable, run_root=view.root,
        views=list(view.nodes.values()), gpu_hours=view.spent.usage.gpu_hours,
        agent_costs=view.agent_costs, totals=totals, token_fields=TOKEN_FIELDS,
        spent=view.spent.lines(test=True), notes=view.notes, strategy_file=strategy_file,
        score_metrics=sorted({name for p in view.phases for name in score_names(p.log.series)}),
        base_val=view.spent.base_val,
        pending=any(v.status.pending for v in view.nodes.values()),
        tree=TREE, areas=drawn.tree_areas, curves=drawn.node_curves.files,
        earlier=drawn.node_curves.earlier,
        generated=time.strftime("%Y-%m-%d %H:%M:%S %Z"), fmt=fmt, creator=creator(view.root),
        version=__version__)
