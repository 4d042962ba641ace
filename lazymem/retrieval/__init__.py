"""Retrieve broadly: BM25 and dense retrievers, reciprocal rank fusion, optional reranking."""
