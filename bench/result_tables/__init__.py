"""Markdown tables of bench/RESULTS.md, one builder per benchmark, from the payloads in bench/results/*.json.

One module per benchmark family; what they share (accuracy columns, cell formats, conventions) is in common.py.
"""

from __future__ import annotations

from .bundle_truncate import bundle_truncate
from .cold_start import cold_start, fresh_install
from .contention import contention
from .hardening import amplification, guard_cost, loop_stalls, request_cost
from .label_text import label_encoders, labels_added_later
from .label_text_stage import label_text_stage
from .lamp import lamp_better, lamp_candidates, lamp_debtags, lamp_fast
from .lamp_ray import lamp_ray
from .lazy_models import lazy_models
from .lightxml_cascadexml import cascadexml_debtags, equal_budget, lightxml_debtags, lightxml_subset
from .memory_bursts import slow_bodies
from .multi_model import multi_model
from .oip import oip
from .onnx_encoders import encoder_variants
from .peers import peers_exclude_self
from .ray import ray_xlinear
from .ray_scoring import ray_scoring
from .reload_storm import reload_storm
from .rollout import rollout_gates, rollout_traffic
from .service import (
    explain_latency,
    inference_threads,
    inline_vs_worker,
    service_batch,
    service_latency,
    service_load,
)
from .shadow import shadow
from .static import static_alpha_levels, static_debtags
from .tail import losses_debtags, tail_debtags
from .update import update_labels
from .xlinear import beam_1m, shortlist_vs_exact, tree_swap, xlinear_seeds, xlinear_validation, xlinear_vs_pecos
from .xr_transformer import xr_transformer_debtags, xr_transformer_engine, xr_transformer_latency

# The benchmark name a result file records → the builder of its tables.
BUILDERS = {
    f.__name__: f
    for f in (
        xlinear_vs_pecos,
        peers_exclude_self,
        xlinear_seeds,
        label_text_stage,
        tree_swap,
        xlinear_validation,
        beam_1m,
        shortlist_vs_exact,
        service_latency,
        service_batch,
        service_load,
        guard_cost,
        loop_stalls,
        ray_xlinear,
        shadow,
        rollout_traffic,
        lazy_models,
        rollout_gates,
        bundle_truncate,
        amplification,
        request_cost,
        inline_vs_worker,
        inference_threads,
        tail_debtags,
        xr_transformer_debtags,
        xr_transformer_latency,
        xr_transformer_engine,
        lightxml_debtags,
        lightxml_subset,
        cascadexml_debtags,
        equal_budget,
        encoder_variants,
        losses_debtags,
        cold_start,
        fresh_install,
        static_debtags,
        static_alpha_levels,
        explain_latency,
        update_labels,
        lamp_better,
        lamp_debtags,
        lamp_ray,
        multi_model,
        lamp_fast,
        lamp_candidates,
        ray_scoring,
        slow_bodies,
        reload_storm,
        contention,
        oip,
        label_encoders,
        labels_added_later,
    )
}
