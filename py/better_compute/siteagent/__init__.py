"""The site agent (`better-compute serve site-agent`, issue 14): runs on a site's network, takes the
BMC operations the database's reconciler issued for its machines (site_api, role bc_site_agent),
opens the BMC credentials sealed to its own key, runs each operation over Redfish (sushy) and
returns the outcome with the operation's epoch (a stale epoch is FENCED, sql/700)."""
