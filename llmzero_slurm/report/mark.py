"""The file that marks a folder as a report's, apart from report.build so that the commands
that only check for it (every CLI command, through cli/common.py) import no drawing code."""
MARK = ".llmzero-report"     # this folder is a report's: a new report may replace its files
