package sweep

// Recommend is recommend, for the black-box tests.
var Recommend = recommend
