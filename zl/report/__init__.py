"""Console presentation of FlagGems' result tables (`zl.report.table`: folding constant
inputs into a legend line, colouring SUCCESS / FAILED). The fold format itself has one
definition, `zl.runlog.sizefold`, shared with the run.log parser that unfolds it."""
