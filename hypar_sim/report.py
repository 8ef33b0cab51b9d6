"""Plain-text tables for people: networks, layers and plans."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: `networks` prints tables without loading the planner
    from hypar_sim.planner.plan import Plan
    from hypar_sim.workload.graph import Graph, Node
    from hypar_sim.workload.network import Network

GB = 1e9  # bytes; the paper's GB is decimal

#: Units people read, largest first: (name, size in the base unit).
TIME_UNITS = (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9))
BYTE_UNITS = (("GB", 1e9), ("MB", 1e6), ("kB", 1e3), ("B", 1.0))


def unit_for(values: Sequence[float], units: Sequence[tuple[str, float]]) -> tuple[str, float]:
    """The largest unit in which the largest of `values` is at least 1 (the smallest unit
    when all are 0): one unit for a whole column, named in its header."""
    largest = max((abs(v) for v in values), default=0.0)
    return next(((name, size) for name, size in units if largest >= size), units[-1])


def quantity(value: float, units: Sequence[tuple[str, float]], digits: int = 4) -> str:
    """`value` in the unit that fits it, e.g. 0.0012 s -> '1.2 ms', 3.4e9 B -> '3.4 GB'."""
    name, size = unit_for([value], units)
    return f"{value / size:.{digits}g} {name}"


def plural(count: int, word: str) -> str:
    """'1 accelerator', '16 accelerators'."""
    return f"{count} {word}{'' if count == 1 else 's'}"

#: Widest plan grid printed with layer names as headers (wider ones are numbered).


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], align: str = "") -> str:
    """A fixed-width table; `align` has one l, c or r per column (default: first l, rest r)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    align = align or "l" + "r" * (len(headers) - 1)
    lines = []
    for n, row in enumerate(cells):
        lines.append("  ".join(
            c.ljust(w) if a == "l" else c.center(w) if a == "c" else c.rjust(w)
            for c, w, a in zip(row, widths, align, strict=True)
        ).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def networks_table(networks: Sequence[Network]) -> str:
    rows = []
    for net in networks:
        conv = sum(1 for layer in net.layers if layer.kind.value == "conv")
        rows.append((net.name, len(net.layers), conv, len(net.layers) - conv,
                     f"{net.weights:,}", f"{net.macs_per_sample:,}", str(net.input)))
    return table(("network", "layers", "conv", "fc", "weights", "MACs/sample", "input"), rows)


def layers_table(network: Network) -> str:
    rows = []
    for layer in network.layers:
        if layer.kind.value == "conv":
            op = f"{layer.kernel}x{layer.kernel}/{layer.stride} pad {layer.padding}"
        else:
            op = "fc"
        pool = (f"{layer.pool.kernel}x{layer.pool.kernel}/{layer.pool.stride}"
                f"{' ceil' if layer.pool.ceil_mode else ''}" if layer.pool else "-")
        rows.append((layer.name, layer.kind.value, str(layer.input), op, str(layer.conv_output),
                     pool, str(layer.output), f"{layer.weights:,}", f"{layer.macs_per_sample:,}"))
    head = (f"{network.name}: {network.description}\nsource: {network.source}\n"
            f"input {network.input}, {len(network.layers)} weighted layers, "
            f"{network.weights:,} weights, {network.macs_per_sample:,} MACs per sample\n\n")
    return head + table(
        ("layer", "kind", "input", "kernel", "conv out", "pool", "output", "weights", "MACs/sample"),
        rows,
    )


def graphs_table(graphs: Sequence[Graph]) -> str:
    """The graph networks: nodes, parameters, MACs, inputs."""
    rows = [(g.name, len(g.nodes), sum(1 for n in g.nodes if n.macs), f"{g.params:,}",
             f"{g.macs_per_sample:,}", " ".join(f"{k} {list(v)}" for k, v in g.inputs.items()))
            for g in graphs]
    return table(("graph", "nodes", "with MACs", "parameters", "MACs/sample", "inputs"), rows)


def op_label(node: Node) -> str:
    """A node's operator, `+pool` where a pooling is folded into it; an importer's
    tensor_op with the operation it stands for."""
    if node.op == "tensor_op":
        return f"tensor_op {node.attrs.get('function', '')}".rstrip()
    return f"{node.op}+pool" if node.attrs.get("pool") else node.op


def clip(text: str, width: int) -> str:
    """`text` cut to `width` characters, its end kept (an exported node's name ends in what
    tells it apart: '/layer1/layer1.0/conv2/Conv_output_0')."""
    return text if len(text) <= width else "…" + text[len(text) - width + 1:]


#: Width of the node table (`nodes_table`): its text columns are cut to fit.
TABLE_COLUMNS = 120


def nodes_table(graph: Graph) -> str:
    """Every node of a graph: operator, inputs, output shape, parameters, MACs (long names
    and operators cut, `clip`, so that a row fits TABLE_COLUMNS; `--json` has them
    whole)."""
    heads = ("node", "op", "inputs", "output", "parameters", "MACs/sample")
    full = [(n.name, op_label(n), ", ".join(n.inputs), "x".join(map(str, n.shape)),
             f"{n.params:,}", f"{n.macs:,}") for n in graph.nodes]
    widths = [max(len(str(row[i])) for row in [heads, *full]) for i in range(len(heads))]
    room = TABLE_COLUMNS - sum(widths[3:]) - 2 * (len(heads) - 1)
    op = min(widths[1], 16)
    name = min(widths[0], max(len(heads[0]), (room - op) * 11 // 20))
    inputs = max(len(heads[2]), room - op - name)
    rows = [(clip(a, name), clip(b, op), clip(c, inputs), *rest) for a, b, c, *rest in full]
    outputs = clip(", ".join(graph.outputs), 60)
    notes = "".join(f"note: {note}\n" for note in graph.notes)
    head = (f"{graph.name}: {graph.description}\nsource: {graph.source}\n{notes}"
            f"{len(graph.nodes)} nodes, {graph.params:,} parameters, "
            f"{graph.macs_per_sample:,} MACs per sample, outputs {outputs}\n\n")
    return head + table(("node", "op", "inputs", "output", "parameters", "MACs/sample"), rows,
                        "lllrrr")


def hardware_table(rows: Sequence[dict], derived: Sequence[tuple[str, str, str]]) -> str:
    """The effective configuration: key, value, unit, allowed values, source; then derived
    quantities."""
    main = table(("key", "value", "unit", "allowed", "source"),
                 [(r["key"], f"{r['value']:g}" if isinstance(r["value"], int | float)
                   else str(r["value"]), r["unit"], r["allowed"], r["source"]) for r in rows],
                 "lrlrl")
    extra = table(("derived", "value", "unit"), derived, "lrl")
    return main + "\n\n" + extra


def hardware_yaml(rows: Sequence[dict]) -> str:
    """The effective configuration as a YAML file `--config` reads back: one key a line,
    its unit, meaning and source as comments."""
    lines = ["# hypar-sim hardware configuration (`hypar-sim hardware --yaml`); every key may",
             "# be removed (its default is then used). Units and sources in the comments."]
    for row in rows:
        value = row["value"]
        text = repr(value) if isinstance(value, float) else str(value)
        unit = f" [{row['unit']}]" if row["unit"] else ""
        lines.append(f"# {row['meaning']}{unit}; {row['source'] or 'default'}")
        lines.append(f"{row['key']}: {text}")
    return "\n".join(lines)


def comparison_table(results: Sequence, objectives: Sequence[str] | None = None,
                     bound_bytes: float | None = None, kinds: Sequence[str] = (),
                     baseline: str = "data") -> str:
    """Strategies side by side, normalized to the `baseline` strategy (its first result; data
    parallelism by default): speedup, energy efficiency, bytes; what each minimised; how many
    layer-levels each kind takes; and the lower bound on bytes."""
    base = next(r for r in results if r.strategy == baseline)
    first = results[0]
    objectives = objectives or ["bytes"] * len(results)
    time_unit, time_size = unit_for([r.latency_s for r in results], TIME_UNITS)
    byte_unit, byte_size = unit_for([r.traffic_bytes for r in results], BYTE_UNITS)
    rows = []
    shared = training_of(first.config or {}).parts()
    for r, objective in zip(results, objectives, strict=True):
        own = [part for part in training_of(r.config or {}).parts()
               if part not in shared]  # where optimal chose how to train
        chosen = f" [{', '.join(own)}]" if own else ""
        rows.append((r.strategy, objective, f"{r.latency_s / time_size:.4g}",
                     f"{base.latency_cycles / r.latency_cycles:.2f}x", f"{r.energy_j:.4g}",
                     f"{base.energy_pj / r.energy_pj:.2f}x", f"{r.traffic_bytes / byte_size:.4g}",
                     f"{r.traffic_bytes / base.traffic_bytes:.2f}x" if base.traffic_bytes else "-",
                     f"{r.time_shares['communication']:.0%}", _kind_counts(r.plan) + chosen))
    head = (f"{first.network} on {plural(first.accelerators, 'accelerator')} ({first.topology}), batch "
            f"{first.batch}, traffic model {first.traffic_model}, {first.engine} engine"
            f"{', inference (forward pass only)' if first.phases == 'forward' else ''}"
            f"{training_note(first.config or {})}; speedup, "
            f"energy efficiency and bytes relative to "
            f"{'data parallelism' if baseline == 'data' else baseline}\n\n")
    text = head + table(("strategy", "minimises", f"latency {time_unit}", "speedup", "energy J",
                         "efficiency", f"traffic {byte_unit}", "bytes", "comm share",
                         "plan (kind: layers x levels)"), rows)
    if bound_bytes is not None:
        text += (f"\n\nlower bound on the bytes of any plan of kinds {','.join(kinds)}: "
                 f"{bound_bytes / GB:.4g} GB (planner.bound; plans using other kinds may move "
                 "less)")
    return text


def _kind_counts(plan: Sequence[Sequence[str]]) -> str:
    """How many (layer, level) cells each kind takes, e.g. 'batch 32, in 12'."""
    counts: dict[str, int] = {}
    for level in plan:
        for kind in level:
            counts[kind] = counts.get(kind, 0) + 1
    return ", ".join(f"{kind} {count}" for kind, count in counts.items())


def training_of(values: Mapping[str, Any]):
    """The training options a run config's keys record (`planner.training.Training`)."""
    from hypar_sim.planner.training import Training

    given = {key: values[key] for key in Training.__dataclass_fields__ if key in values}
    given["stage_names"] = tuple(given.get("stage_names", ()))
    return Training(**given)


def training_note(values: Mapping[str, Any]) -> str:
    """', optimizer adam, bf16, ZeRO 3, recompute full' in a run's or a plan's first line,
    where the training options are not the defaults (`values`: a run config's keys)."""
    return training_of(values).note()


def plan_summary(plan: Plan, graph: Graph, clock_hz: float | None = None) -> str:
    """A plan: every node's kinds (top level first) and the bytes into it; for a
    time or energy objective, the planner's estimate (`planner.timed_costs`)."""
    search = f", {plan.search} search" if plan.search else ""
    head = (f"{plan.network}: strategy {plan.strategy}{search}, hierarchy {plan.hierarchy} "
            f"({plural(plan.accelerators, 'accelerator')}), batch "
            f"{plan.batch}, traffic model {plan.traffic_model}"
            f"{', inference (forward pass only)' if plan.phases == 'forward' else ''}"
            f"{plan.training.note()}\n\n")
    kinds = [" ".join(column) for column in plan.columns]
    if plan.stages:  # the pipeline level first
        kinds = [f"stage{s + 1} {column}".strip() for s, column in zip(plan.stages, kinds,
                                                                       strict=True)]
    rows = [(node.name, op_label(node), column or "-", f"{moved / 1e6:.4g}")
            for node, column, moved in zip(graph.nodes, kinds, plan.node_bytes, strict=True)]
    levels = ", ".join(f"level {h + 1}: {b / GB:.4g} GB"
                       for h, b in enumerate(plan.traffic_bytes_per_level))
    return (head + table(("node", "op", "kinds (top level first)", "bytes in (MB)"), rows)
            + f"\n\ntotal traffic per "
            f"{'inference (forward pass)' if plan.phases == 'forward' else 'training step'}: "
            f"{plan.traffic_bytes / GB:.4g} GB" + (f" ({levels})" if levels else "")
            + f"\nmemory of the busiest cube: {plan.footprint_bytes / 2**30:.4g} GiB ("
            + ", ".join(f"{name.replace('_', ' ')} {part / 2**30:.3g}"
                        for name, part in plan.footprint_parts)
            + " GiB)" + _estimated(plan, clock_hz))


def _estimated(plan: Plan, clock_hz: float | None) -> str:
    """The line of the planner's estimate of a time or energy objective ('' for bytes)."""
    if plan.objective == "time":
        ms = f" = {plan.estimate / clock_hz * 1e3:.4g} ms" if clock_hz else ""
        return f"\nestimated step time (minimised): {plan.estimate:.4g} cycles{ms}"
    if plan.objective == "energy":
        return f"\nestimated step energy (minimised): {plan.estimate * 1e-12:.4g} J"
    return ""


def bound_total(moved: float, bound: float) -> str:
    """The bound in total and the plan's ratio to it."""
    ratio = f"the plan moves {moved / bound:.2f}x the bound" if bound else \
        "0 with these kinds: one of them (out, spatial) moves only inputs, which it does not count"
    return f"\n\nlower bound {bound / GB:.4g} GB (planner.bound); {ratio}"


