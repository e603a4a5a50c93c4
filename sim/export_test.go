package sim

// SortDelays exposes sortDelays to the package's external tests.
var SortDelays = sortDelays
