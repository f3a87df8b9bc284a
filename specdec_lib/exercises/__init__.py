"""Workshop exercises: one grader per exercise, each saying in plain words what is wrong.

A grader takes the learner's function, runs it on fixed inputs with seeded generators, compares the result with
the library and with the laws of known mistakes, prints a `Grade`, and raises AssertionError when something is
wrong (`raise_on_failure=False` returns the report instead). Thresholds for sampled checks come from the sample
size (`tv_noise_bound`). An exception raised by the learner's function is reported, never propagated, except
NotImplementedError: an unfinished stub re-raises it unchanged.

Act I   grade_residual, grade_acceptance_probability, grade_speculative_sample
Act II  grade_verify_block, grade_smallest_catching_m; the field guide's grade_find_bug; the kit's grade_name_bug
Surface grade_penalised_rows (the sampling surface, 02d)
Act III grade_expected_tokens, grade_conditional_acceptance
Act IV  grade_speedup, grade_best_k
Lab     grade_fit_alpha, grade_predict_speedup
Act V   grade_rrs_step, grade_best_widths; bending the rules: grade_is_exact, grade_best_setting
Act VI  grade_block_h, grade_needs
Self    grade_choose_exit, grade_tree_rule (drafts from the target itself, notebook 09)
"""
from ._report import Grade
from .audit import grade_name_bug
from .bending_the_rules import grade_best_setting, grade_is_exact
from .block_decoder import grade_smallest_catching_m, grade_verify_block
from .cost_model import grade_best_k, grade_speedup
from .distribution import grade_acceptance_probability, grade_residual, grade_speculative_sample
from .drafts_from_the_target import grade_choose_exit, grade_tree_rule
from .field_guide import grade_find_bug
from .many_drafts import grade_best_widths, grade_rrs_step
from .measure_it import grade_fit_alpha, grade_predict_speedup
from .optimal_verification import grade_block_h, grade_needs
from .sampling_surface import grade_penalised_rows
from .token_accounting import grade_conditional_acceptance, grade_expected_tokens

__all__ = ["Grade", "grade_residual", "grade_acceptance_probability", "grade_speculative_sample",
           "grade_verify_block", "grade_smallest_catching_m", "grade_find_bug", "grade_expected_tokens",
           "grade_conditional_acceptance", "grade_speedup", "grade_best_k", "grade_fit_alpha", "grade_predict_speedup",
           "grade_rrs_step", "grade_best_widths", "grade_is_exact", "grade_best_setting",
           "grade_block_h", "grade_needs", "grade_name_bug", "grade_penalised_rows", "grade_choose_exit",
           "grade_tree_rule"]
