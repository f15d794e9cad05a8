"""The InfiniBand fabric as the controller sees it: where its description and observations come from (`sources`),
the fabric a topology command works on (`view`), which routes flows follow (`routes`), and the evidence behind
`topology flaps`, read only (`cable_health`). Nothing here changes a switch: that is `provision.repairs`.
"""
