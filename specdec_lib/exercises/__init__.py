"""Workshop exercises: one checker per exercise, each saying in plain words what is wrong.

A checker takes the learner's function, runs it on fixed inputs with seeded generators, compares the result with
the library and with the laws of known mistakes, prints a `Report`, and raises AssertionError when something is
wrong (`raise_on_failure=False` returns the report instead). Thresholds for sampled checks come from the sample
size (`tv_noise_bound`). An exception raised by the learner's function is reported, never propagated, except
NotImplementedError: an unfinished stub re-raises it unchanged.

Act I   check_residual, check_acceptance_probability, check_speculative_sample
Act II  check_verify_block, check_smallest_catching_m; the field guide's check_find_bug
Act III check_expected_tokens, check_conditional_acceptance
Act IV  check_speedup, check_best_k
Lab     check_fit_alpha, check_predict_speedup
Act V   check_rrs_step, check_best_widths; bending the rules: check_is_exact, check_best_setting
"""
from ._report import Report
from .bending_the_rules import check_best_setting, check_is_exact
from .block_decoder import check_smallest_catching_m, check_verify_block
from .cost_model import check_best_k, check_speedup
from .distribution import check_acceptance_probability, check_residual, check_speculative_sample
from .field_guide import check_find_bug
from .many_drafts import check_best_widths, check_rrs_step
from .measure_it import check_fit_alpha, check_predict_speedup
from .token_accounting import check_conditional_acceptance, check_expected_tokens

__all__ = ["Report", "check_residual", "check_acceptance_probability", "check_speculative_sample",
           "check_verify_block", "check_smallest_catching_m", "check_find_bug", "check_expected_tokens",
           "check_conditional_acceptance", "check_speedup", "check_best_k", "check_fit_alpha", "check_predict_speedup",
           "check_rrs_step", "check_best_widths", "check_is_exact", "check_best_setting"]
