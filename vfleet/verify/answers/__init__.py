"""The answers gate (docs/answers.md): a versioned set of short questions with one answer each, run greedily
against a live server and scored by a normalized match; the teacher-forced log-probabilities of a fixed
reference text; and the paired judgement of a candidate against the profile's last promoted run.

The profile's ``verify.answers`` section is vfleet.profile_answers (core floor). Modules, bottom up:
``questions`` (the set and the reference text, as data), ``scoring`` (the normalized match), ``stats``
(Wilson, exact McNemar, the paired interval), ``records`` (what a run writes), ``drift`` (log-probability
differences), ``verdict`` (the judgement), ``runner`` (the HTTP side) and ``select`` (the stable-item
selection a person runs)."""
