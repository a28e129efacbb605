"""Published tables as data: what papers and READMEs report, with the settings they state and their source."""
