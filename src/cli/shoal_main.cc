#include "cli/cli.h"

int main(int argc, char** argv) { return shoal::cli::Main(argc, argv); }
