"""Analysis of saved run directories (reads only files): run logs, findings, paired comparisons,
plots and the result report."""
