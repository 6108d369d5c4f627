"""Analysis of saved run directories (reads only files): run logs, findings, comparisons, plots, report."""
