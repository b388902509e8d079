"""One module per HTTP protocol; each declares its routes and its error shapes."""
