"""How the controller reaches and works on hosts: the connection model (`connection`), SSH sessions and a
campaign's pool (`remote`), the Ansible inventory and runner (`inventory`, `ansible`), the BMCs (`bmc`), a hung
host recovered (`recovery`), the burn-in's runtime on the nodes (`runtime`). What every session speaks is
`provision.facts.session`, node-side.
"""
