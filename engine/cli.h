/* The `moevm` command's subcommands. Each returns the process exit code: 0 on success,
 * 1 on a failure it reported, 2 on bad usage. */
#ifndef MVM_ENGINE_CLI_H
#define MVM_ENGINE_CLI_H

int mvm_cmd_info(int argc, char **argv);
int mvm_cmd_demo(int argc, char **argv);
int mvm_cmd_options(int argc, char **argv);

/* "moevm: <what>: <mvm_last_error()>" on stderr; returns 1. */
int mvm_cli_error(const char *what);

#endif
