/* SPDX-License-Identifier: Apache-2.0 */
/* airlock: the command-line client of the Airlock public API. */
#include "cli.h"

int main(int argc, char **argv) {
        return cli_main(argc, argv);
}
