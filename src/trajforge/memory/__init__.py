"""Experience memory (layer 5, beside curate): lessons distilled from stored trajectories
(``distil``), kept in a JSONL memory file with their provenance (``items``), retrieved by BM25
(``trajforge.retrieval``) into a run's prompts and grown as it runs (``live``)."""
