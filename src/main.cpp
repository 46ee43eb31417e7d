#include "cli/run_cli.h"

int main(int argc, char** argv) { return collage::run_cli(argc, argv); }
