"""Deep-research reports: the report task's prompt and the parsing of a report's citations
(docs/reports.md). Scoring lives in :mod:`websailor.eval.race` and :mod:`websailor.eval.fact`."""
