"""Split kinds: "split loop dimension d of a layer k ways" (Tofu's view of an operator).

A layer's loop nest has the dimensions of `Dim`; a split kind names the one
it splits. The shipped kinds are HyPar's two (batch = dp, in = mp), AccPar's
third (out) and Tofu's spatial split of the output rows. A new kind is one
`register_kind(SplitKind(...))` call: the planner, traffic models, schedule
and command line find it here; nothing else branches on kind names.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hypar_sim.errors import InputError, closest
from hypar_sim.workload.dims import Dim  # the loops a kind splits (kinds.Dim, as before)


@dataclass(frozen=True)
class SplitKind:
    """Split loop dimension `dim` into as many parts as the level has members (`dim` None:
    split none; every member of the level computes the same, its tensors replicated)."""

    name: str
    dim: Dim | None
    summary: str
    aliases: tuple[str, ...] = ()
    paper_label: str = ""  # HyPar's name for it (dp, mp), where it has one

    def __str__(self) -> str:
        return self.name


#: The registry: canonical name -> kind, in the order kinds are listed and tried.
KINDS: dict[str, SplitKind] = {}


def register_kind(kind: SplitKind) -> SplitKind:
    """Add `kind` to the registry (its name and aliases must be new)."""
    taken = set(KINDS) | {alias for k in KINDS.values() for alias in k.aliases}
    clash = ({kind.name, *kind.aliases} & taken)
    if clash:
        raise ValueError(f"split kind name(s) {sorted(clash)} are registered already")
    KINDS[kind.name] = kind
    return kind


def unregister_kind(name: str) -> None:
    """Remove a kind (tests that register their own kinds clean up with this)."""
    KINDS.pop(name, None)


for _kind in (
    SplitKind("batch", Dim.N, "samples (data parallelism; HyPar's dp)", ("dp",), "dp"),
    SplitKind("in", Dim.C, "input channels (model parallelism; HyPar's mp)", ("mp",), "mp"),
    SplitKind("out", Dim.K, "output channels (AccPar's third type)"),
    SplitKind("spatial", Dim.P, "output rows, with a halo of input rows (Tofu); a token "
              "stream's positions (sequence parallelism)", ("seq",)),
    SplitKind("heads", Dim.H, "attention heads (graph networks; Megatron-LM's attention split)"),
    SplitKind("groups", Dim.G, "groups of a grouped or depthwise convolution (graph networks)"),
    SplitKind("replicate", None, "no split: every member of the level computes the node whole, "
              "its output replicated (a layer norm kept whole; not HyPar's paper reading)",
              ("rep",)),
):
    register_kind(_kind)


def kind_of(dim: Dim) -> str:
    """The registered kind that splits `dim`: code that means "the data-parallel split" asks
    for `kind_of(Dim.N)` rather than spelling a name."""
    for kind in KINDS.values():
        if kind.dim is dim:
            return kind.name
    raise ValueError(f"no split kind splits dimension {dim}")


#: HyPar's two kinds by what they split: samples (dp) and input channels (mp).
BATCH, IN = kind_of(Dim.N), kind_of(Dim.C)
#: The kinds a planner may use unless told otherwise: HyPar's two.
DEFAULT_KINDS = (BATCH, IN)
#: The kinds only graph networks have: attention heads and convolution groups.
GRAPH_EXTRA_KINDS = (kind_of(Dim.H), kind_of(Dim.G))


def listed(names: Sequence[str]) -> str:
    """'a, b and c': kind names in a sentence."""
    names = list(names)
    return f"{', '.join(names[:-1])} and {names[-1]}" if len(names) > 1 else "".join(names)


def allowed_names() -> str:
    return ", ".join(f"{k.name}{' (' + '/'.join(k.aliases) + ')' if k.aliases else ''}"
                     for k in KINDS.values())


def resolve_kind(word: str, where: str = "--kinds") -> str:
    """The canonical name of kind `word` (a name or an alias, any case)."""
    word = word.strip().lower()
    if word in KINDS:
        return word
    for kind in KINDS.values():
        if word in kind.aliases:
            return kind.name
    names = [*KINDS, *(a for k in KINDS.values() for a in k.aliases)]
    raise InputError(f"{where}: unknown split kind '{word}'{closest(word, names)}; "
                     f"allowed: {allowed_names()}")


def parse_kinds(text: str, where: str = "--kinds") -> tuple[str, ...]:
    """'batch,in,out' -> canonical names in registry order, without repeats."""
    words = [w for w in text.replace(" ", ",").split(",") if w.strip()]
    if not words:
        raise InputError(f"{where}: no split kind given; allowed: {allowed_names()}")
    chosen = {resolve_kind(word, where) for word in words}
    return tuple(name for name in KINDS if name in chosen)


def paper_label(name: str) -> str:
    """HyPar's label of a kind (dp, mp) for the paper's figures; the name otherwise."""
    return KINDS[name].paper_label or name


#: HyPar's labels of its two kinds, as its figures name them.
DP, MP = paper_label(BATCH), paper_label(IN)
