//! Scenarios played through fake hosts: one Envoy's workers (`scenarios`) and a fleet of two
//! (`fleet_scenarios`).

mod entity_l2_scenarios;
mod entity_scenarios;
mod fleet_scenarios;
mod route_entity_scenarios;
mod scenarios;
