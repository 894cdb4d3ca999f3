package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/quorate/quorate/policyfile"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

func newPolicyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Apply, list, get, delete and validate admission policies",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newPolicyApplyCmd(), newPolicyListCmd(), newPolicyGetCmd(), newPolicyDeleteCmd(), newPolicyValidateCmd())
	return cmd
}

func newPolicyApplyCmd() *cobra.Command {
	var (
		client clientOptions
		file   string
		dryRun bool
		output outputFormat
	)
	cmd := &cobra.Command{
		Use:   "apply -f FILE [--dry-run]",
		Short: "Create or replace the policies of a YAML file (all or none)",
		Long: "Apply creates or replaces every policy of the file in one step: all or none.\n" +
			"A policy whose definition is unchanged keeps its version; a changed one gets\n" +
			"version+1. Policies not in the file are left alone. The file is checked locally\n" +
			"first, so a bad file fails before anything is sent.\n\n" +
			"--dry-run applies nothing: it compares the file with the cluster's policies as\n" +
			"apply would (defaults filled in) and prints each policy as new (+), changed (~,\n" +
			"with every changed field) or unchanged (=), with the version it would get; with\n" +
			"-o json or yaml, the policies as they would be.\n\n" +
			"What policy get or list prints with -o yaml is a policy file: applying it\n" +
			"unchanged changes nothing.",
		Example: "  quorate policy apply -f examples/policies.yaml\n" +
			"  quorate policy apply -f examples/policies.yaml --dry-run\n" +
			"  cat policies.yaml | quorate policy apply -f -\n" +
			"  quorate policy list -o yaml > backup.yaml; quorate policy apply -f backup.yaml",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return errors.New("policy apply: --file (-f) is required: the policy file to apply, or - for stdin")
			}
			policies, err := policyfile.Read(file, cmd.InOrStdin())
			if err != nil {
				return err
			}
			base, ctx, cancel, err := client.begin(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			if dryRun {
				return policyApplyDryRun(ctx, cmd.OutOrStdout(), &client, base, file, output, policies)
			}
			resp, err := client.adminClient(base).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: policies}))
			if err != nil {
				return wrapRPC("ApplyPolicies", base, "", err)
			}
			if output.structured() {
				return output.writePolicyAnswer(cmd.OutOrStdout(), resp.Msg, resp.Msg.GetPolicies())
			}
			fmt.Fprintf(cmd.OutOrStdout(), "applied %d %s from %s\n", len(resp.Msg.GetPolicies()), plural(len(resp.Msg.GetPolicies()), "policy", "policies"), file)
			return writePolicies(cmd.OutOrStdout(), resp.Msg.GetPolicies())
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "YAML policy file (- for stdin)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "show what applying the file would change, against the cluster's policies; apply nothing")
	addClientFlags(cmd, &client)
	addOutputFlag(cmd, &output)
	return cmd
}

// policyApplyDryRun prints what applying policies (read from file) would
// change on the cluster at base, and changes nothing: it only lists the
// cluster's policies.
func policyApplyDryRun(ctx context.Context, w io.Writer, client *clientOptions, base, file string, output outputFormat,
	policies []*quoratev1.Policy) error {
	resp, err := client.adminClient(base).ListPolicies(ctx, connect.NewRequest(&quoratev1.ListPoliciesRequest{}))
	if err != nil {
		return wrapRPC("ListPolicies", base, "", err)
	}
	changes := policyfile.Plan(policies, resp.Msg.GetPolicies())
	if output.structured() {
		planned := policyfile.Planned(changes)
		return output.writePolicyAnswer(w, planned, planned.GetPolicies())
	}
	return policyfile.WritePlan(w, file, changes)
}

func newPolicyListCmd() *cobra.Command {
	var (
		client clientOptions
		output outputFormat
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the stored policies with their versions",
		Long: "List prints the stored policies as a table, as protojson (-o json), or as a\n" +
			"policy file (-o yaml) that policy apply -f accepts unchanged, each version a comment.",
		Example: "  quorate policy list\n  quorate policy list -o yaml > policies.yaml",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			base, ctx, cancel, err := client.begin(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			resp, err := client.adminClient(base).ListPolicies(ctx, connect.NewRequest(&quoratev1.ListPoliciesRequest{}))
			if err != nil {
				return wrapRPC("ListPolicies", base, "", err)
			}
			if output.structured() {
				return output.writePolicyAnswer(cmd.OutOrStdout(), resp.Msg, resp.Msg.GetPolicies())
			}
			if len(resp.Msg.GetPolicies()) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no policies; add some with: quorate policy apply -f FILE")
				return nil
			}
			return writePolicies(cmd.OutOrStdout(), resp.Msg.GetPolicies())
		},
	}
	addClientFlags(cmd, &client)
	addOutputFlag(cmd, &output)
	return cmd
}

func newPolicyGetCmd() *cobra.Command {
	var (
		client clientOptions
		output outputFormat
	)
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Show one stored policy with its version",
		Long: "Get shows one policy as the asked node's replica holds it (which may lag the\n" +
			"leader by a moment). An absent policy is not_found.",
		Example: "  quorate policy get api-free\n  quorate policy get reports-monthly -o json\n" +
			"  quorate policy get api-free -o yaml   # a policy file: policy apply -f accepts it",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("policy get: want one NAME, the policy to show (got %d arguments)", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			base, ctx, cancel, err := client.begin(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			resp, err := client.adminClient(base).GetPolicy(ctx, connect.NewRequest(&quoratev1.GetPolicyRequest{Name: args[0]}))
			if err != nil {
				return wrapRPC("GetPolicy", base, "", err)
			}
			if output.structured() {
				return output.writePolicyAnswer(cmd.OutOrStdout(), resp.Msg, []*quoratev1.Policy{resp.Msg.GetPolicy()})
			}
			return writePolicies(cmd.OutOrStdout(), []*quoratev1.Policy{resp.Msg.GetPolicy()})
		},
	}
	addClientFlags(cmd, &client)
	addOutputFlag(cmd, &output)
	return cmd
}

func newPolicyDeleteCmd() *cobra.Command {
	var (
		client clientOptions
		output outputFormat
	)
	cmd := &cobra.Command{
		Use:   "delete NAME...",
		Short: "Delete policies (all or none)",
		Long: "Delete deletes every named policy in one step, or none when one of them does not\n" +
			"exist (the not_found error names it). It prints the deleted policies with their\n" +
			"last versions. Decisions under a deleted policy answer not_found; its keys' state\n" +
			"is reclaimed as it expires. Delete is not retried: a repeat of a delete that was\n" +
			"applied answers not_found.",
		Example: "  quorate policy delete api-free\n  quorate policy delete old-a old-b -o json",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errors.New("policy delete: NAME is required: the policies to delete")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			base, ctx, cancel, err := client.begin(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			resp, err := client.adminClient(base).DeletePolicies(ctx, connect.NewRequest(&quoratev1.DeletePoliciesRequest{Names: args}))
			if err != nil {
				return wrapRPC("DeletePolicies", base, "", err)
			}
			if output.structured() {
				return output.writePolicyAnswer(cmd.OutOrStdout(), resp.Msg, resp.Msg.GetPolicies())
			}
			deleted := resp.Msg.GetPolicies()
			fmt.Fprintf(cmd.OutOrStdout(), "deleted %d %s\n", len(deleted), plural(len(deleted), "policy", "policies"))
			return writePolicies(cmd.OutOrStdout(), deleted)
		},
	}
	addClientFlags(cmd, &client)
	addOutputFlag(cmd, &output)
	return cmd
}

func newPolicyValidateCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "validate -f FILE",
		Short: "Check a policy file locally, without a server",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return errors.New("policy validate: --file (-f) is required: the policy file to check, or - for stdin")
			}
			policies, err := policyfile.Read(file, cmd.InOrStdin())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d %s OK\n", file, len(policies), plural(len(policies), "policy", "policies"))
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "YAML policy file (- for stdin)")
	return cmd
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
