"""`hicache advise`: on a team's own trace, should HiCache be on, with which SGLang flags, and how sure.

space: what SGLang 0.5.23 accepts (layout x io backend as it resolves them, L2 tiers, write
policies, TP sharing, L3); candidate_pricing: a candidate's replay priced across the profile's ensemble
against HiCache off; search: the seed's order, replays shared wherever only pricing differs;
ranking: the order and the leave-it-off rule; flags: the launch flags and host settings.
"""
