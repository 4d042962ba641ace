"""Reports over finished runs: the paper's tables, Figure 2-style plots and a static HTML dashboard."""
