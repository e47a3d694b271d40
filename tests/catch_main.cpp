// Catch2 v2 main for every CPU test executable.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
